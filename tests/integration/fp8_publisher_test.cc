// Fp8Publisher (weightsync/fp8.h) with real Subscribers, a real Relay and
// delta pulls: every pulled fp8 version is bit-identical to quantize_image()
// of the float32 source, whether pulled whole (tcp, shm), as a delta, or
// through a relay; a float32 engine dequantizes it; the quantization runs on
// the converter thread after publish() has returned; and what a hostile
// trainer publishes (NaN scales, names that do not match) is refused by the
// subscriber's checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "narrow/narrowing_hooks.h"
#include "peers.h"
#include "weightsync/fp8.h"
#include "weightsync/relay.h"

using namespace weightsync;
using namespace wstest;

namespace {

const std::string kSecret = "fp8-secret";

// A small model: kept tensors (embedding, norm, bias) and two fp8 matrices
// with partial edge blocks.
WeightLayout wide_layout() {
  auto built = WeightLayout::build({{"embed.weight", DType::kFloat32, {300, 64}},
                                    {"layers.0.fc.weight", DType::kFloat32, {256, 300}},
                                    {"layers.0.fc.bias", DType::kFloat32, {256}},
                                    {"layers.0.out.weight", DType::kFloat32, {200, 256}},
                                    {"norm.weight", DType::kFloat32, {64}}});
  REQUIRE(built.ok());
  return std::move(built).value();
}

// Training in miniature: random weights, then each step nudges one element in 64.
class Versions {
 public:
  explicit Versions(const WeightLayout& layout) : layout_(layout), image_(layout.total_bytes(), 0), rng_(42) {
    std::normal_distribution<float> dist(0.0f, 0.05f);
    for (const TensorEntry& t : layout_.tensors()) {
      for (std::uint64_t i = 0; i < t.bytes / 4; ++i) put(t.offset + 4 * i, dist(rng_));
    }
    put(layout_.tensors()[1].offset + 4 * 9, std::numeric_limits<float>::quiet_NaN());
    put(layout_.tensors()[1].offset + 4 * 10, -std::numeric_limits<float>::infinity());
  }
  const std::vector<unsigned char>& image() const { return image_; }
  void step() {
    for (const TensorEntry& t : layout_.tensors()) {
      for (std::uint64_t i = 0; i < t.bytes / 4; i += 64) {
        float x;
        std::memcpy(&x, &image_[t.offset + 4 * i], 4);
        put(t.offset + 4 * i, x * 0.9f);
      }
    }
  }

 private:
  void put(std::uint64_t at, float x) { std::memcpy(&image_[at], &x, 4); }
  const WeightLayout& layout_;
  std::vector<unsigned char> image_;
  std::mt19937 rng_;
};

PublisherOptions fp8_options(bool deltas) {
  PublisherOptions o;
  o.secret = kSecret;
  o.io_timeout_ms = 5000;
  o.deltas = deltas;
  o.slots = 3;
  return o;
}

SubscriberOptions sub_options(const std::string& transport) {
  SubscriberOptions o = quick_options(5000, transport);
  o.secret = kSecret;
  return o;
}

std::vector<unsigned char> quantized(const WeightLayout& wide, const WeightLayout& fp8,
                                     const std::vector<unsigned char>& source) {
  std::vector<unsigned char> out(fp8.total_bytes(), 0);
  REQUIRE(quantize_image(wide, source.data(), fp8, out.data()).ok());
  return out;
}

bool same_tensors(const WeightLayout& layout, const unsigned char* a, const unsigned char* b) {
  for (const TensorEntry& t : layout.tensors()) {
    if (std::memcmp(a + t.offset, b + t.offset, t.bytes) != 0) return false;
  }
  return true;
}

bool shm_viable() {
  for (const auto& t : available_transports()) {
    if (t.name == "shm") return t.viable;
  }
  return false;
}

PullOptions waiting(std::uint64_t delta_base = 0) {
  PullOptions o;
  o.delta_base = delta_base;
  o.wait = std::chrono::milliseconds(5000);
  return o;
}

}  // namespace

TEST_CASE("fp8 publisher: pulls are bit-identical to quantize_image, kept as fp8 or dequantized, tcp and shm",
          "[fp8][fp8-publisher]") {
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("transport " << transport);
  if (transport == "shm" && !shm_viable()) {
    WARN("shm is not viable on this machine; skipped");
    return;
  }
  const WeightLayout wide = wide_layout();
  auto fp8 = fp8_layout(wide);
  REQUIRE(fp8.ok());
  auto pub = Fp8Publisher::create(wide, {}, fp8_options(false));
  REQUIRE(pub.ok());
  CHECK((*pub)->publisher().layout() == *fp8);
  CHECK((*pub)->wide_layout() == wide);
  auto sub = Subscriber::connect((*pub)->publisher().address(), sub_options(transport));
  REQUIRE(sub.ok());
  CHECK((*sub)->transport() == transport);
  REQUIRE(check_fp8_pair((*sub)->layout(), wide).ok());  // what a float32 engine checks once
  Versions versions(wide);
  std::vector<unsigned char> image(fp8->total_bytes(), 0);
  for (std::uint64_t v = 1; v <= 3; ++v) {
    INFO("version " << v);
    versions.step();
    REQUIRE((*pub)->publish(v, versions.image().data(), versions.image().size()).ok());
    REQUIRE((*pub)->flush().ok());
    auto pulled = (*sub)->pull(Destination::contiguous(image.data(), image.size()), waiting());
    REQUIRE(pulled.ok());
    CHECK(pulled->version == v);
    CHECK(pulled->bytes == fp8->payload_bytes());
    const auto want = quantized(wide, *fp8, versions.image());
    CHECK(same_tensors(*fp8, image.data(), want.data()));
    CHECK(check_fp8_scales(*fp8, image.data()).ok());  // what an fp8 engine checks per version
    std::vector<unsigned char> widened(wide.total_bytes(), 0), reference(wide.total_bytes(), 0);
    REQUIRE(dequantize_image(*fp8, image.data(), wide, widened.data()).ok());
    REQUIRE(dequantize_image(*fp8, want.data(), wide, reference.data()).ok());
    CHECK(std::memcmp(widened.data(), reference.data(), widened.size()) == 0);  // NaN bits included
  }
  const NarrowingStats stats = (*pub)->stats();
  CHECK(stats.versions_converted == 3);
  CHECK(stats.last_committed_version == 3);
  CHECK(stats.conversion_seconds > 0.0);
}

TEST_CASE("fp8 publisher: publish returns before the quantization, which runs on the converter thread",
          "[fp8][fp8-publisher]") {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::thread::id converter;
  struct HookGuard {
    ~HookGuard() { detail::set_narrowing_convert_hook({}); }
  } guard;
  detail::set_narrowing_convert_hook([&](std::uint64_t) {
    std::unique_lock<std::mutex> lock(mu);
    converter = std::this_thread::get_id();
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  });
  const WeightLayout wide = wide_layout();
  auto pub = Fp8Publisher::create(wide, {}, fp8_options(false));
  REQUIRE(pub.ok());
  struct Opener {  // on a failed REQUIRE: let the converter go before the publisher joins it
    std::mutex& mu;
    std::condition_variable& cv;
    bool& open;
    ~Opener() {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
      cv.notify_all();
    }
  } opener{mu, cv, open};
  Versions versions(wide);
  REQUIRE((*pub)->publish(1, versions.image().data(), versions.image().size()).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return converter != std::thread::id(); }));
  }
  CHECK(converter != std::this_thread::get_id());
  CHECK((*pub)->publisher().stats().versions_published == 0);  // held: nothing committed yet
  {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
  }
  cv.notify_all();
  auto flushed = (*pub)->flush();
  REQUIRE(flushed.ok());
  CHECK(flushed->version == 1);
  CHECK((*pub)->publisher().stats().versions_published == 1);
}

TEST_CASE("fp8 publisher: delta pulls and relayed delta pulls of fp8 versions arrive bit-identical",
          "[fp8][fp8-publisher][delta][relay]") {
  const WeightLayout wide = wide_layout();
  auto fp8 = fp8_layout(wide);
  REQUIRE(fp8.ok());
  auto pub = Fp8Publisher::create(wide, {}, fp8_options(true));
  REQUIRE(pub.ok());
  RelayOptions relay_options;
  relay_options.upstreams = {(*pub)->publisher().address()};
  relay_options.subscriber = sub_options("tcp");
  relay_options.publisher.secret = kSecret;
  relay_options.publisher.deltas = true;
  auto relay = Relay::create(relay_options);
  REQUIRE(relay.ok());
  Versions versions(wide);
  REQUIRE((*pub)->publish(1, versions.image().data(), versions.image().size()).ok());
  REQUIRE((*pub)->flush().ok());
  auto direct = Subscriber::connect((*pub)->publisher().address(), sub_options("tcp"));
  auto leaf = Subscriber::connect((*relay)->address(), sub_options("tcp"));
  REQUIRE(direct.ok());
  REQUIRE(leaf.ok());
  CHECK((*leaf)->layout() == *fp8);
  std::vector<unsigned char> a(fp8->total_bytes(), 0), b(fp8->total_bytes(), 0);
  REQUIRE((*direct)->pull(Destination::contiguous(a.data(), a.size()), waiting()).ok());
  REQUIRE((*leaf)->pull(Destination::contiguous(b.data(), b.size()), waiting()).ok());
  for (std::uint64_t v = 2; v <= 4; ++v) {
    INFO("version " << v);
    versions.step();
    REQUIRE((*pub)->publish(v, versions.image().data(), versions.image().size()).ok());
    REQUIRE((*pub)->flush().ok());
    const auto want = quantized(wide, *fp8, versions.image());
    auto got_direct = (*direct)->pull(Destination::contiguous(a.data(), a.size()), waiting(v - 1));
    REQUIRE(got_direct.ok());
    CHECK(got_direct->version == v);
    CHECK(got_direct->delta);
    CHECK(got_direct->wire_bytes < fp8->payload_bytes());
    CHECK(same_tensors(*fp8, a.data(), want.data()));
    auto got_leaf = (*leaf)->pull(Destination::contiguous(b.data(), b.size()), waiting(v - 1));
    REQUIRE(got_leaf.ok());
    CHECK(got_leaf->version == v);
    CHECK(got_leaf->delta);
    CHECK(same_tensors(*fp8, b.data(), want.data()));
  }
  CHECK((*pub)->publisher().stats().deltas_served == 3);
  CHECK((*relay)->stats().publisher.deltas_served == 3);
}

TEST_CASE("fp8 hostile trainer: NaN scales and mismatched names on the wire are refused by the subscriber's checks",
          "[fp8][hostile]") {
  const WeightLayout wide = wide_layout();
  auto fp8 = fp8_layout(wide);
  REQUIRE(fp8.ok());
  // A plain Publisher sends whatever it likes in the fp8 layout.
  auto hostile = Publisher::create(*fp8, fp8_options(false));
  REQUIRE(hostile.ok());
  Versions versions(wide);
  auto image = quantized(wide, *fp8, versions.image());
  const TensorEntry* scale = fp8->find("layers.0.out.weight_scale_inv");
  REQUIRE(scale != nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&image[scale->offset + 4], &nan, 4);
  REQUIRE((*hostile)->publish(1, image.data(), image.size()).ok());
  auto sub = Subscriber::connect((*hostile)->address(), sub_options("tcp"));
  REQUIRE(sub.ok());
  std::vector<unsigned char> pulled(fp8->total_bytes(), 0);
  REQUIRE((*sub)->pull(Destination::contiguous(pulled.data(), pulled.size()), waiting()).ok());
  const Status scales = check_fp8_scales((*sub)->layout(), pulled.data());
  CHECK(scales.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(scales.message(), Catch::Contains("layers.0.out.weight"));
  std::vector<unsigned char> out(wide.total_bytes(), 0x5a);
  CHECK(dequantize_image((*sub)->layout(), pulled.data(), wide, out.data()).code() == ErrorCode::kInvalidArgument);
  CHECK(out == std::vector<unsigned char>(wide.total_bytes(), 0x5a));

  // A trainer whose fp8 layout names another model's tensors.
  std::vector<TensorSpec> specs;
  for (const TensorEntry& t : fp8->tensors()) specs.push_back(t.spec);
  specs[2].name = "layers.0.fc.weight_scale";  // the scale under another name
  auto renamed = WeightLayout::build(specs);
  REQUIRE(renamed.ok());
  auto other = Publisher::create(*renamed, fp8_options(false));
  REQUIRE(other.ok());
  auto sub2 = Subscriber::connect((*other)->address(), sub_options("tcp"));
  REQUIRE(sub2.ok());
  const Status pair = check_fp8_pair((*sub2)->layout(), wide);
  CHECK(pair.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(pair.message(), Catch::Contains("layers.0.fc.weight_scale_inv"));
}
