// The integrity layer (docs/security.md, "Integrity"): version tags keyed by
// the secret, sealed control frames, and the refusals that keep a session
// from silently running without them. The proxy test flips bits in the
// publisher's stream through a real TCP proxy: with integrity no flip may
// go unnoticed.
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "auth/handshake.h"
#include "auth/integrity.h"
#include "common/byte_codec.h"
#include "peers.h"
#include "tcp_proxy.h"
#include "weightsync/log.h"
#include "weightsync/publisher.h"
#include "weightsync/subscriber.h"

using namespace weightsync;
using namespace wstest;

namespace {

const std::string kSecret = "integrity-test-secret";

WeightLayout small_layout() {
  auto layout = WeightLayout::build({{"w", DType::kFloat32, {8192}}, {"b", DType::kBFloat16, {1000}}});
  REQUIRE(layout.ok());
  return std::move(*layout);
}

std::unique_ptr<Publisher> publisher_with(const WeightLayout& layout, bool integrity, bool checksum = false,
                                          bool encryption = false) {
  PublisherOptions o;
  o.secret = kSecret;
  o.integrity = integrity;
  o.encryption = encryption;
  o.checksum = checksum;
  auto p = Publisher::create(layout, o);
  REQUIRE(p.ok());
  return std::move(*p);
}

SubscriberOptions subscriber_options(bool integrity, const std::string& transport = "tcp",
                                     bool encryption = false) {
  auto o = quick_options(3000, transport);
  o.secret = kSecret;
  o.integrity = integrity;
  o.encryption = encryption;
  return o;
}

// The version tag computed here from its definition, with OpenSSL directly:
// key = HMAC-SHA256(secret, u16 length + "weightsync/1 version tags"), tag =
// the first 8 bytes (little-endian) of HMAC-SHA256(key, the tensors in layout order).
std::uint64_t expected_tag(const WeightLayout& layout, const std::uint8_t* image) {
  const std::string label = "weightsync/1 version tags";
  std::vector<std::uint8_t> msg = {static_cast<std::uint8_t>(label.size()), 0};
  msg.insert(msg.end(), label.begin(), label.end());
  unsigned char key[32], tag[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), kSecret.data(), static_cast<int>(kSecret.size()), msg.data(), msg.size(), key, &len);
  std::vector<std::uint8_t> tensors;
  for (const auto& t : layout.tensors()) tensors.insert(tensors.end(), image + t.offset, image + t.offset + t.bytes);
  HMAC(EVP_sha256(), key, 32, tensors.data(), tensors.size(), tag, &len);
  std::uint64_t out = 0;
  for (int i = 7; i >= 0; --i) out = (out << 8) | tag[i];
  return out;
}

}  // namespace

TEST_CASE("integrity: every pull verifies a tag keyed by the secret, over tcp and shm", "[integrity]") {
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("transport " << transport);
  const auto layout = small_layout();
  auto publisher = publisher_with(layout, true);
  publish_pattern(*publisher, 1);
  auto sub = Subscriber::connect(publisher->address(), subscriber_options(true, transport));
  REQUIRE(sub.ok());
  CHECK((*sub)->publisher_checksums());  // integrity turns the tags on
  std::vector<std::uint8_t> image(layout.total_bytes());
  auto pulled = (*sub)->pull(Destination::contiguous(image.data(), image.size()));
  REQUIRE(pulled.ok());
  CHECK(image_mismatch(layout, image.data(), 1) == -1);
  CHECK(pulled->checksum_verified);
  CHECK(pulled->checksum == expected_tag(layout, image.data()));
  // Later versions too, and the plain checksum of the same bytes is different.
  publish_pattern(*publisher, 2);
  pulled = (*sub)->pull(Destination::contiguous(image.data(), image.size()));
  REQUIRE(pulled.ok());
  CHECK(pulled->checksum == expected_tag(layout, image.data()));
  weightsync::detail::StreamHasher plain;
  for (const auto& t : layout.tensors()) plain.update(image.data() + t.offset, t.bytes);
  CHECK(plain.digest() != pulled->checksum);
}

TEST_CASE("integrity: deltas carry keyed tags and arrive bit-exact", "[integrity][delta]") {
  const auto layout = small_layout();
  PublisherOptions o;
  o.secret = kSecret;
  o.integrity = true;
  o.deltas = true;
  auto publisher = Publisher::create(layout, o);
  REQUIRE(publisher.ok());
  std::vector<std::uint8_t> source(layout.total_bytes(), 0);
  std::mt19937 rng(5);
  for (auto& b : source) b = static_cast<std::uint8_t>(rng());
  REQUIRE((*publisher)->publish(1, source.data(), source.size()).ok());
  auto sub = Subscriber::connect((*publisher)->address(), subscriber_options(true));
  REQUIRE(sub.ok());
  std::vector<std::uint8_t> image(layout.total_bytes());
  REQUIRE((*sub)->pull(Destination::contiguous(image.data(), image.size())).ok());
  for (std::size_t i = 0; i < source.size(); i += 97) source[i] ^= 1;
  REQUIRE((*publisher)->publish(2, source.data(), source.size()).ok());
  PullOptions by_delta;
  by_delta.delta_base = 1;
  by_delta.wait = std::chrono::milliseconds(2000);
  auto pulled = (*sub)->pull(Destination::contiguous(image.data(), image.size()), by_delta);
  REQUIRE(pulled.ok());
  CHECK(pulled->delta);
  CHECK(pulled->checksum == expected_tag(layout, image.data()));
  for (const auto& t : layout.tensors()) {
    CHECK(std::memcmp(image.data() + t.offset, source.data() + t.offset, t.bytes) == 0);
  }
}

TEST_CASE("integrity: a session cannot run without it by mistake, and it needs a secret", "[integrity]") {
  const auto layout = small_layout();
  SECTION("a subscriber asks, the publisher does not run with it") {
    auto publisher = publisher_with(layout, false);
    auto sub = Subscriber::connect(publisher->address(), subscriber_options(true));
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
    CHECK_THAT(sub.status().message(), Catch::Contains("WEIGHTSYNC_INTEGRITY"));
  }
  SECTION("the publisher runs with it, the subscriber does not ask") {
    auto publisher = publisher_with(layout, true);
    auto sub = Subscriber::connect(publisher->address(), subscriber_options(false));
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
    CHECK_THAT(sub.status().message(), Catch::Contains("WEIGHTSYNC_INTEGRITY"));
  }
  SECTION("no secret on either side") {
    PublisherOptions o;
    o.secret = "";
    o.integrity = true;
    auto p = Publisher::create(layout, o);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == ErrorCode::kInvalidConfig);
    auto publisher = publisher_with(layout, false);
    auto options = subscriber_options(true);
    options.secret = "";
    auto sub = Subscriber::connect(publisher->address(), options);
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
  }
}

TEST_CASE("integrity: sealed frames refuse a change, a replay, a reorder and the other direction's key",
          "[integrity]") {
  using namespace weightsync::detail;
  auto keys = derive_session_keys(kSecret, 42, Nonce{}, Nonce{});
  REQUIRE(keys.ok());
  CHECK(keys->to_publisher != keys->to_subscriber);
  FrameSeal subscriber(keys->to_publisher, keys->to_subscriber);
  FrameSeal publisher(keys->to_subscriber, keys->to_publisher);
  std::vector<std::uint8_t> a = {1, 2, 3}, b = {4, 5};
  REQUIRE(subscriber.seal(MsgType::kAcquire, a).ok());
  REQUIRE(subscriber.seal(MsgType::kAcquire, b).ok());
  CHECK(a.size() == 3 + kFrameTagBytes);
  Frame fa{MsgType::kAcquire, a}, fb{MsgType::kAcquire, b};
  SECTION("in order: both open, tags stripped") {
    REQUIRE(publisher.open(fa).ok());
    REQUIRE(publisher.open(fb).ok());
    CHECK(fa.payload == std::vector<std::uint8_t>{1, 2, 3});
  }
  SECTION("reordered") { CHECK(publisher.open(fb).code() == ErrorCode::kProtocolError); }
  SECTION("replayed") {
    Frame again = fa;
    REQUIRE(publisher.open(fa).ok());
    CHECK(publisher.open(again).code() == ErrorCode::kProtocolError);
  }
  SECTION("a payload bit or the type changed") {
    Frame flipped = fa;
    flipped.payload[1] ^= 4;
    CHECK(publisher.open(flipped).code() == ErrorCode::kProtocolError);
    Frame retyped = fa;
    retyped.type = MsgType::kRelease;
    CHECK(publisher.open(retyped).code() == ErrorCode::kProtocolError);
  }
  SECTION("sealed with the wrong direction's key (a reflected frame)") {
    FrameSeal reflector(keys->to_subscriber, keys->to_publisher);
    std::vector<std::uint8_t> c = {9};
    REQUIRE(reflector.seal(MsgType::kAcquire, c).ok());
    Frame fc{MsgType::kAcquire, c};
    CHECK(publisher.open(fc).code() == ErrorCode::kProtocolError);
  }
  SECTION("HELLO's feature bits change the handshake's proofs") {
    const auto plain = handshake_transcript("client", Role::kControl, 0, Nonce{}, Nonce{});
    const auto asked = handshake_transcript("client", Role::kControl, 0, Nonce{}, Nonce{}, kHelloIntegrity);
    CHECK(plain != asked);
    HelloMsg hello;
    hello.features = kHelloIntegrity;
    auto decoded = HelloMsg::decode(hello.encode());
    REQUIRE(decoded.ok());
    CHECK(decoded->features == kHelloIntegrity);
    auto bytes = hello.encode();
    bytes.back() = 4;  // an unknown feature
    CHECK(HelloMsg::decode(bytes).status().code() == ErrorCode::kProtocolError);
  }
}

namespace {

struct FlipCounts {
  int flips = 0;        // bits the proxy flipped (one per trial at most)
  int errors = 0;       // the pull failed (connect or pull)
  int retried = 0;      // the pull succeeded after discarding the corrupt attempt
  int unnoticed = 0;    // the pull succeeded at once: nothing noticed the flip
  int wrong = 0;        // the pull succeeded with a wrong version or wrong bytes
};

// One bit flipped at a random offset of the control (1) or data (2)
// connection's publisher-to-subscriber stream, per trial.
FlipCounts flip_trials(bool integrity, int trials, std::uint32_t seed, bool encryption = false) {
  const auto layout = small_layout();
  auto publisher = publisher_with(layout, integrity, /*checksum=*/true, encryption);
  publish_pattern(*publisher, 1);
  std::vector<std::uint8_t> image(layout.total_bytes());
  std::mt19937 rng(seed);
  FlipCounts c;
  for (int i = 0; i < trials; ++i) {
    const int connection = 1 + static_cast<int>(rng() % 2);
    const std::uint64_t span = connection == 1 ? 700 : layout.total_bytes() + 300;
    FaultyProxy proxy(publisher->port(), connection, rng() % span, static_cast<std::uint8_t>(1u << (rng() % 8)));
    auto options = subscriber_options(integrity, "tcp", encryption);
    options.max_retries = 2;
    // A flip in a length field leaves a side waiting for bytes that never
    // come: short timeouts keep such a trial short.
    options.connect_timeout_ms = 1000;
    options.io_timeout_ms = 250;
    auto sub = Subscriber::connect(proxy.address(), options);
    Result<PullResult> pulled = sub.ok() ? (*sub)->pull(Destination::contiguous(image.data(), image.size()))
                                         : Result<PullResult>(sub.status());
    sub = Status(ErrorCode::kInternal, "closed");  // close before the proxy goes
    if (proxy.flips() == 0) continue;  // the offset lay past the stream
    ++c.flips;
    if (!pulled.ok()) {
      ++c.errors;
    } else if (pulled->version != 1 || image_mismatch(layout, image.data(), 1) != -1) {
      ++c.wrong;
    } else if (pulled->retries > 0) {
      ++c.retried;
    } else {
      ++c.unnoticed;
    }
  }
  return c;
}

// WEIGHTSYNC_TEST_FLIPS and WEIGHTSYNC_TEST_FLIPS_SEED scale the test up
// for the figure in docs/slow_links.md (several processes, other seeds).
int flip_trial_count() {
  const char* env = std::getenv("WEIGHTSYNC_TEST_FLIPS");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const int fallback = 100;  // sanitizer builds run several times slower
#else
  const int fallback = 300;
#endif
  return env != nullptr ? std::atoi(env) : fallback;
}

std::uint32_t flip_seed() {
  const char* env = std::getenv("WEIGHTSYNC_TEST_FLIPS_SEED");
  return env != nullptr ? static_cast<std::uint32_t>(std::strtoul(env, nullptr, 10)) : 17;
}

// Each refused trial logs a warning: keep the output to the counts.
struct QuietLogs {
  LogLevel level = log_level();
  QuietLogs() { set_log_level(LogLevel::kError); }
  ~QuietLogs() { set_log_level(level); }
};

void check_all_caught(const char* label, const FlipCounts& c, int trials) {
  std::printf("%s %d flips: %d failed, %d retried, %d unnoticed, %d wrong\n", label, c.flips, c.errors, c.retried,
              c.unnoticed, c.wrong);
  CHECK(c.flips > trials / 3);
  CHECK(c.wrong == 0);
  CHECK(c.unnoticed == 0);
}

}  // namespace

TEST_CASE("integrity: a proxy flipping one bit of the publisher's stream is always caught", "[integrity][proxy]") {
  const int trials = flip_trial_count();
  const QuietLogs quiet;
  const FlipCounts with = flip_trials(true, trials, flip_seed());
  check_all_caught("integrity on: ", with, trials);
  // The same flips without integrity (xxHash3 checksums on): some go
  // unnoticed, which is what the test would see if the layer stopped working.
  const FlipCounts without = flip_trials(false, trials, flip_seed());
  std::printf("integrity off: %d flips: %d failed, %d retried, %d unnoticed, %d wrong\n", without.flips,
              without.errors, without.retried, without.unnoticed, without.wrong);
  CHECK(without.unnoticed + without.wrong > 0);
}

TEST_CASE("encryption: a proxy flipping one bit of the publisher's encrypted stream is always caught",
          "[encryption][proxy]") {
  const int trials = flip_trial_count();
  const QuietLogs quiet;
  // The stream is longer by the records' headers and tags: the offsets span it.
  const FlipCounts with = flip_trials(true, trials, flip_seed() + 1, /*encryption=*/true);
  check_all_caught("encryption on:", with, trials);
}
