// Delta versions end to end (docs/slow_links.md, "Delta versions"): a real
// Publisher with deltas on, real Subscribers over tcp and shm. Each version
// pulled by deltas is bit-exact to what was published; chains span several
// versions; every case that must fall back to a full pull does, and still
// delivers the exact version.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <thread>

#include "peers.h"
#include "subscriber/control_client.h"
#include "weightsync/publisher.h"
#include "weightsync/relay.h"
#include "weightsync/subscriber.h"

using namespace weightsync;
using namespace wstest;

namespace {

const std::string kSecret = "delta-pull-secret";

// Three bf16 tensors, about 1.5 MiB, with padding between them.
WeightLayout delta_layout() {
  auto layout = WeightLayout::build({{"embed", DType::kBFloat16, {512, 1000}},
                                     {"norm", DType::kBFloat16, {1000}},
                                     {"head", DType::kBFloat16, {250, 1000}}},
                                    256);
  REQUIRE(layout.ok());
  return std::move(*layout);
}

// A training run in miniature: each version changes about one element in
// `every` of the previous one (padding stays zero).
class Versions {
 public:
  explicit Versions(const WeightLayout& layout) : layout_(layout), image_(layout.total_bytes(), 0), rng_(42) {
    for (const auto& t : layout_.tensors()) {
      for (std::uint64_t i = 0; i < t.bytes; ++i) image_[t.offset + i] = static_cast<std::uint8_t>(rng_());
    }
  }
  const std::vector<std::uint8_t>& image() const { return image_; }
  void step(unsigned every) {
    for (const auto& t : layout_.tensors()) {
      for (std::uint64_t i = 0; i < t.bytes; i += 2) {
        if (rng_() % every == 0) image_[t.offset + i] ^= static_cast<std::uint8_t>(1 + rng_() % 255);
      }
    }
  }
  void scramble() {  // every byte new: no delta can be smaller
    for (const auto& t : layout_.tensors()) {
      for (std::uint64_t i = 0; i < t.bytes; ++i) image_[t.offset + i] = static_cast<std::uint8_t>(rng_());
    }
  }

 private:
  const WeightLayout& layout_;
  std::vector<std::uint8_t> image_;
  std::mt19937 rng_;
};

std::unique_ptr<Publisher> delta_publisher(const WeightLayout& layout, bool deltas, std::size_t history = 8,
                                           bool encryption = false) {
  PublisherOptions o;
  o.secret = kSecret;
  o.encryption = encryption;
  o.deltas = deltas;
  o.delta_history = history;
  o.slots = 3;
  auto p = Publisher::create(layout, o);
  REQUIRE(p.ok());
  return std::move(*p);
}

std::unique_ptr<Subscriber> delta_subscriber(const Publisher& publisher, const std::string& transport = "tcp") {
  auto options = quick_options(5000, transport);
  options.secret = kSecret;
  auto s = Subscriber::connect(publisher.address(), options);
  REQUIRE(s.ok());
  return std::move(*s);
}

void publish(Publisher& publisher, std::uint64_t version, const Versions& v) {
  REQUIRE(publisher.publish(version, v.image().data(), v.image().size()).ok());
}

// The tensors of `image` equal those of `expected` (padding ignored).
bool same_tensors(const WeightLayout& layout, const std::uint8_t* image, const std::vector<std::uint8_t>& expected) {
  for (const auto& t : layout.tensors()) {
    if (std::memcmp(image + t.offset, expected.data() + t.offset, t.bytes) != 0) return false;
  }
  return true;
}

PullOptions from(std::uint64_t base) {
  PullOptions o;
  o.delta_base = base;
  o.wait = std::chrono::milliseconds(3000);
  return o;
}

}  // namespace

TEST_CASE("deltas: each new version arrives as a delta, bit-exact, contiguous and scatter", "[delta]") {
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("transport " << transport);
  const auto layout = delta_layout();
  auto publisher = delta_publisher(layout, true);
  auto subscriber = delta_subscriber(*publisher, transport);
  REQUIRE(subscriber->transport() == transport);
  REQUIRE(subscriber->publisher_deltas());
  Versions versions(layout);
  publish(*publisher, 1, versions);
  std::vector<std::uint8_t> image(layout.total_bytes());
  auto first = subscriber->pull(Destination::contiguous(image.data(), image.size()));
  REQUIRE(first.ok());
  CHECK_FALSE(first->delta);
  CHECK(first->wire_bytes == layout.payload_bytes());
  auto scatter = allocate_scatter(layout);
  for (std::uint64_t v = 2; v <= 6; ++v) {
    versions.step(20);
    publish(*publisher, v, versions);
    const bool use_scatter = v == 6;
    if (use_scatter) {  // the scatter destination starts from what the image holds
      for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
        std::memcpy(scatter.buffers[i].data(), image.data() + layout.tensors()[i].offset, layout.tensors()[i].bytes);
      }
    }
    auto pulled = use_scatter ? subscriber->pull(Destination::scatter(scatter.entries), from(v - 1))
                              : subscriber->pull(Destination::contiguous(image.data(), image.size()), from(v - 1));
    INFO("version " << v);
    REQUIRE(pulled.ok());
    CHECK(pulled->version == v);
    CHECK(pulled->delta);
    CHECK(pulled->checksum_verified);
    CHECK(pulled->bytes == layout.payload_bytes());
    CHECK(pulled->wire_bytes < layout.payload_bytes() / 4);
    if (use_scatter) {
      for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
        const auto& t = layout.tensors()[i];
        CHECK(std::memcmp(scatter.buffers[i].data(), versions.image().data() + t.offset, t.bytes) == 0);
      }
    } else {
      CHECK(same_tensors(layout, image.data(), versions.image()));
    }
  }
  const auto stats = subscriber->stats();
  CHECK(stats.delta_pulls == 5);
  CHECK(stats.delta_fallbacks == 0);
  CHECK(stats.delta_bytes < 5 * layout.payload_bytes() / 4);
  CHECK(publisher->stats().deltas_served == 5);
}

TEST_CASE("deltas: a subscriber several versions behind gets the chain and lands on the newest", "[delta]") {
  const auto layout = delta_layout();
  auto publisher = delta_publisher(layout, true);
  auto subscriber = delta_subscriber(*publisher);
  Versions versions(layout);
  publish(*publisher, 1, versions);
  std::vector<std::uint8_t> image(layout.total_bytes());
  REQUIRE(subscriber->pull(Destination::contiguous(image.data(), image.size())).ok());
  for (std::uint64_t v = 2; v <= 5; ++v) {
    versions.step(50);
    publish(*publisher, v, versions);
  }
  // The delta thread may still be encoding version 5: the pull waits for it.
  auto pulled = subscriber->pull(Destination::contiguous(image.data(), image.size()), from(1));
  REQUIRE(pulled.ok());
  CHECK(pulled->delta);
  CHECK(pulled->version == 5);
  CHECK(same_tensors(layout, image.data(), versions.image()));
}

TEST_CASE("deltas: too old, not smaller, a wrong base or no deltas offered: a full pull, still exact", "[delta]") {
  const auto layout = delta_layout();
  std::vector<std::uint8_t> image(layout.total_bytes());
  const auto contiguous = Destination::contiguous(image.data(), image.size());

  SECTION("the base is older than the kept deltas") {
    auto publisher = delta_publisher(layout, true, /*history=*/2);
    auto subscriber = delta_subscriber(*publisher);
    Versions versions(layout);
    publish(*publisher, 1, versions);
    REQUIRE(subscriber->pull(contiguous).ok());
    // One version at a time: the delta thread works on the newest commit and
    // skips the rest, so versions published back to back could be folded
    // into one delta from 1. Each is computed before the next is published,
    // and with a history of 2, 1 -> 2 is dropped by the end.
    for (std::uint64_t v = 2; v <= 5; ++v) {
      versions.step(50);
      publish(*publisher, v, versions);
      for (int i = 0; i < 1000 && publisher->stats().deltas_computed < v - 1; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      REQUIRE(publisher->stats().deltas_computed == v - 1);
    }
    auto pulled = subscriber->pull(contiguous, from(1));
    REQUIRE(pulled.ok());
    CHECK_FALSE(pulled->delta);
    CHECK(pulled->version == 5);
    CHECK(pulled->wire_bytes == layout.payload_bytes());
    CHECK(subscriber->stats().delta_fallbacks == 1);
    CHECK(same_tensors(layout, image.data(), versions.image()));
  }
  SECTION("the delta would not be smaller than the version") {
    auto publisher = delta_publisher(layout, true);
    auto subscriber = delta_subscriber(*publisher);
    Versions versions(layout);
    publish(*publisher, 1, versions);
    REQUIRE(subscriber->pull(contiguous).ok());
    versions.scramble();
    publish(*publisher, 2, versions);
    auto pulled = subscriber->pull(contiguous, from(1));
    REQUIRE(pulled.ok());
    CHECK_FALSE(pulled->delta);
    CHECK(subscriber->stats().delta_fallbacks == 1);
    CHECK(same_tensors(layout, image.data(), versions.image()));
  }
  SECTION("the destination does not hold the base it names: the checksum catches it") {
    auto publisher = delta_publisher(layout, true);
    auto subscriber = delta_subscriber(*publisher);
    Versions versions(layout);
    publish(*publisher, 1, versions);
    REQUIRE(subscriber->pull(contiguous).ok());
    image[layout.tensors()[2].offset + 17] ^= 0x40;  // one bit differs from version 1
    versions.step(20);
    publish(*publisher, 2, versions);
    auto pulled = subscriber->pull(contiguous, from(1));
    REQUIRE(pulled.ok());
    CHECK_FALSE(pulled->delta);
    CHECK(pulled->version == 2);
    CHECK(subscriber->stats().delta_fallbacks == 1);
    CHECK(subscriber->stats().delta_pulls == 0);
    CHECK(same_tensors(layout, image.data(), versions.image()));
  }
  SECTION("a publisher without deltas: delta_base is ignored") {
    auto publisher = delta_publisher(layout, false);
    auto subscriber = delta_subscriber(*publisher);
    CHECK_FALSE(subscriber->publisher_deltas());
    Versions versions(layout);
    publish(*publisher, 1, versions);
    REQUIRE(subscriber->pull(contiguous).ok());
    versions.step(20);
    publish(*publisher, 2, versions);
    auto pulled = subscriber->pull(contiguous, from(1));
    REQUIRE(pulled.ok());
    CHECK_FALSE(pulled->delta);
    CHECK(subscriber->stats().delta_fallbacks == 0);
    CHECK(same_tensors(layout, image.data(), versions.image()));
  }
}

TEST_CASE("deltas: nothing newer is kNotReady at once, and a wait ends when a version lands", "[delta]") {
  const auto layout = delta_layout();
  auto publisher = delta_publisher(layout, true);
  auto subscriber = delta_subscriber(*publisher);
  Versions versions(layout);
  publish(*publisher, 1, versions);
  std::vector<std::uint8_t> image(layout.total_bytes());
  const auto contiguous = Destination::contiguous(image.data(), image.size());
  REQUIRE(subscriber->pull(contiguous).ok());
  PullOptions now;
  now.delta_base = 1;
  auto nothing = subscriber->pull(contiguous, now);
  CHECK(nothing.status().code() == ErrorCode::kNotReady);
  versions.step(20);
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    publish(*publisher, 2, versions);
  });
  auto pulled = subscriber->pull(contiguous, from(1));
  later.join();
  REQUIRE(pulled.ok());
  CHECK(pulled->delta);
  CHECK(pulled->wait_seconds > 0.05);
  CHECK(same_tensors(layout, image.data(), versions.image()));
}

TEST_CASE("hostile peers: FETCH_DELTA for an uncommitted version or an unknown base is refused at once", "[delta][hostile]") {
  using namespace weightsync::detail;
  const auto layout = delta_layout();
  auto publisher = delta_publisher(layout, true);
  Versions versions(layout);
  publish(*publisher, 1, versions);
  versions.step(20);
  publish(*publisher, 2, versions);
  auto target = parse_host_port(publisher->address());
  REQUIRE(target.ok());
  auto control = ControlClient::connect(*target, kSecret, "delta-attacker", 5000, 5000);
  REQUIRE(control.ok());
  std::vector<std::uint8_t> bytes;
  const auto t0 = std::chrono::steady_clock::now();
  // A version far ahead: no worker waits for it.
  auto ahead = control->fetch_delta(FetchDeltaMsg{1, 1000000, 1u << 30, kMaxDeltaWaitMs}, bytes);
  CHECK(ahead.status().code() == ErrorCode::kNotReady);
  CHECK(seconds_since(t0) < 0.5);
  // A base the publisher never had.
  auto unknown = control->fetch_delta(FetchDeltaMsg{77, 78, 1u << 30, 0}, bytes);
  CHECK(unknown.status().code() == ErrorCode::kNotReady);
  // A budget of one byte: the chain is "not smaller".
  auto tight = control->fetch_delta(FetchDeltaMsg{1, 2, 1, kMaxDeltaWaitMs}, bytes);
  CHECK(tight.status().code() == ErrorCode::kNotReady);
  // The connection is still good: the real chain arrives.
  auto real = control->fetch_delta(FetchDeltaMsg{1, 2, 1u << 30, kMaxDeltaWaitMs}, bytes);
  REQUIRE(real.ok());
  CHECK(real->links.size() == 1);
  CHECK(bytes.size() == real->total_bytes());
}

TEST_CASE("deltas: a relay with deltas serves its leaves deltas, bit-exact, with and without encryption",
          "[delta][relay][encryption]") {
  const bool encryption = GENERATE(false, true);
  INFO("encryption " << encryption);
  const auto layout = delta_layout();
  // The trainer computes none: the relay does.
  auto trainer = delta_publisher(layout, false, 8, encryption);
  RelayOptions options;
  options.upstreams = {trainer->address()};
  options.subscriber = quick_options(5000, "tcp");
  options.subscriber.secret = kSecret;
  options.subscriber.encryption = encryption;
  options.publisher.secret = kSecret;
  options.publisher.deltas = true;
  options.publisher.encryption = encryption;
  auto relay = Relay::create(options);
  REQUIRE(relay.ok());
  auto leaf_options = quick_options(5000, "tcp");
  leaf_options.secret = kSecret;
  leaf_options.encryption = encryption;
  Versions versions(layout);
  publish(*trainer, 1, versions);
  auto leaf = Subscriber::connect((*relay)->address(), leaf_options);
  REQUIRE(leaf.ok());
  REQUIRE((*leaf)->publisher_deltas());
  std::vector<std::uint8_t> image(layout.total_bytes());
  const auto contiguous = Destination::contiguous(image.data(), image.size());
  PullOptions first;
  first.wait = std::chrono::milliseconds(5000);
  REQUIRE((*leaf)->pull(contiguous, first).ok());
  for (std::uint64_t v = 2; v <= 4; ++v) {
    versions.step(20);
    publish(*trainer, v, versions);
    auto pulled = (*leaf)->pull(contiguous, from(v - 1));
    INFO("version " << v);
    REQUIRE(pulled.ok());
    CHECK(pulled->version == v);
    CHECK(pulled->delta);
    CHECK(same_tensors(layout, image.data(), versions.image()));
  }
  CHECK((*relay)->stats().publisher.deltas_served == 3);
}
