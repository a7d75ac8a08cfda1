// NarrowingPublisher (weightsync/narrow.h) with a real Subscriber, over tcp
// and shm: the pulled image is bit-exact to narrow_image() of the float32
// source, widening it gives exactly widen(narrow(x)), the conversion runs on
// the converter thread after publish() has returned (held there by the
// internal test hook, no timing involved), newest wins, errors come back by
// flush() or the next publish(), and destruction with work pending is bounded.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "narrow/narrowing_hooks.h"
#include "peers.h"
#include "weightsync/narrow.h"

using namespace weightsync;
using namespace wstest;

namespace {

// A small model: float32 tensors (with a non-float one between them), the
// policy-like alignment of 4 bytes.
WeightLayout wide_layout(std::int64_t scale = 1) {
  auto built = WeightLayout::build({{"embed", DType::kFloat32, {64 * scale, 33}},
                                    {"steps", DType::kInt32, {3}},
                                    {"norm", DType::kFloat32, {33}},
                                    {"head", DType::kFloat32, {17, 64 * scale}}},
                                   4);
  REQUIRE(built.ok());
  return std::move(built).value();
}

// A float32 image of `layout`: normal weights plus every special value.
std::vector<unsigned char> wide_image(const WeightLayout& layout, std::uint32_t seed) {
  std::vector<unsigned char> image(layout.total_bytes(), 0);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  const float specials[] = {0.0f,    -0.0f,  std::numeric_limits<float>::infinity(),
                            -1e-40f, 1e-8f,  std::numeric_limits<float>::quiet_NaN(),
                            70000.f, 65520.f};
  for (const TensorEntry& t : layout.tensors()) {
    for (std::uint64_t i = 0; i < t.bytes / 4; ++i) {
      if (t.spec.dtype == DType::kFloat32) {
        const float f = i < 8 ? specials[i] : dist(rng);
        std::memcpy(&image[t.offset + 4 * i], &f, 4);
      } else {
        const std::uint32_t v = static_cast<std::uint32_t>(rng());
        std::memcpy(&image[t.offset + 4 * i], &v, 4);
      }
    }
  }
  return image;
}

// The tensors' bytes (no padding) of an image, in layout order.
std::vector<unsigned char> payload(const WeightLayout& layout, const void* image) {
  std::vector<unsigned char> out;
  const auto* p = static_cast<const unsigned char*>(image);
  for (const TensorEntry& t : layout.tensors()) out.insert(out.end(), p + t.offset, p + t.offset + t.bytes);
  return out;
}

bool shm_viable() {
  for (const auto& t : available_transports()) {
    if (t.name == "shm") return t.viable;
  }
  return false;
}

// Holds the converter in the test hook until opened; records who called it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<std::pair<std::uint64_t, std::thread::id>> calls;

  void enter(std::uint64_t version) {
    std::unique_lock<std::mutex> lock(mu);
    calls.emplace_back(version, std::this_thread::get_id());
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  bool wait_calls(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return calls.size() >= n; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// Installs the hook for one test case and always removes it.
struct HookGuard {
  explicit HookGuard(Gate& gate) {
    detail::set_narrowing_convert_hook([&gate](std::uint64_t version) { gate.enter(version); });
  }
  ~HookGuard() { detail::set_narrowing_convert_hook({}); }
};

PublisherOptions local_options() {
  PublisherOptions options;
  options.io_timeout_ms = 5000;
  return options;
}

}  // namespace

TEST_CASE("narrowing publisher: pulls are bit-exact to narrow_image of the float32 source, over tcp and shm",
          "[narrow][narrowing-publisher]") {
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm");
  const DType narrow = GENERATE(DType::kBFloat16, DType::kFloat16);
  INFO("transport " << transport << ", " << to_string(narrow));
  if (transport == "shm" && !shm_viable()) {
    WARN("shm is not viable on this machine; skipped");
    return;
  }
  const WeightLayout wide = wide_layout();
  auto expected_layout = narrowed_layout(wide, narrow);
  REQUIRE(expected_layout.ok());
  auto np = NarrowingPublisher::create(wide, narrow, local_options());
  REQUIRE(np.ok());
  CHECK((*np)->publisher().layout() == *expected_layout);
  CHECK((*np)->narrow_dtype() == narrow);
  CHECK((*np)->wide_layout() == wide);

  auto sub = Subscriber::connect((*np)->publisher().address(), quick_options(5000, transport));
  REQUIRE(sub.ok());
  CHECK((*sub)->transport() == transport);
  CHECK((*sub)->layout() == *expected_layout);
  CHECK(check_widenable((*sub)->layout(), wide).ok());

  auto pulled_image = HostBuffer::allocate(expected_layout->total_bytes());
  REQUIRE(pulled_image.ok());
  for (std::uint64_t version = 1; version <= 3; ++version) {
    INFO("version " << version);
    const std::vector<unsigned char> source = wide_image(wide, static_cast<std::uint32_t>(version));
    auto handed = (*np)->publish(version, source.data(), source.size());
    REQUIRE(handed.ok());
    CHECK(handed->version == version);
    auto flushed = (*np)->flush();
    REQUIRE(flushed.ok());
    CHECK(flushed->version == version);

    auto pulled = (*sub)->pull(Destination::contiguous(pulled_image->data(), pulled_image->size()));
    REQUIRE(pulled.ok());
    CHECK(pulled->version == version);
    CHECK(pulled->bytes == expected_layout->payload_bytes());

    std::vector<unsigned char> reference(expected_layout->total_bytes(), 0);
    REQUIRE(narrow_image(wide, source.data(), *expected_layout, reference.data()).ok());
    CHECK(payload(*expected_layout, pulled_image->data()) == payload(*expected_layout, reference.data()));

    // Widened on arrival: exactly widen(narrow(x)), element by element too.
    std::vector<unsigned char> widened(wide.total_bytes(), 0);
    REQUIRE(widen_image(*expected_layout, pulled_image->data(), wide, widened.data()).ok());
    std::vector<unsigned char> round_trip(wide.total_bytes(), 0);
    REQUIRE(widen_image(*expected_layout, reference.data(), wide, round_trip.data()).ok());
    CHECK(payload(wide, widened.data()) == payload(wide, round_trip.data()));
    const TensorEntry& embed = wide.tensors()[0];
    std::size_t wrong = 0;
    for (std::uint64_t i = 0; i < embed.bytes / 4; ++i) {
      float x;
      float y;
      std::memcpy(&x, &source[embed.offset + 4 * i], 4);
      std::memcpy(&y, &widened[embed.offset + 4 * i], 4);
      const float want = narrow == DType::kBFloat16 ? bfloat16_to_float(float_to_bfloat16(x))
                                                    : float16_to_float(float_to_float16(x));
      if (std::memcmp(&want, &y, 4) != 0) ++wrong;
    }
    CHECK(wrong == 0);
  }
  const NarrowingStats stats = (*np)->stats();
  CHECK(stats.versions_handed_over == 3);
  CHECK(stats.versions_converted == 3);
  CHECK(stats.versions_skipped == 0);
  CHECK(stats.last_committed_version == 3);
  CHECK(stats.conversion_seconds > 0.0);
  CHECK((*np)->publisher().stats().versions_published == 3);
}

TEST_CASE(
    "narrowing publisher: publish returns before the conversion, which runs on another thread, and newest "
    "wins",
    "[narrow][narrowing-publisher]") {
  Gate gate;
  HookGuard hook(gate);
  const WeightLayout wide = wide_layout();
  auto np = NarrowingPublisher::create(wide, DType::kBFloat16, local_options());
  REQUIRE(np.ok());
  const std::vector<unsigned char> v1 = wide_image(wide, 1);
  const std::vector<unsigned char> v2 = wide_image(wide, 2);
  const std::vector<unsigned char> v3 = wide_image(wide, 3);

  auto first = (*np)->publish(1, v1.data(), v1.size());
  REQUIRE(first.ok());
  CHECK(first->replaced_version == 0);
  // publish() has returned; the converter holds version 1 in the hook, on
  // its own thread, and nothing is committed yet.
  REQUIRE(gate.wait_calls(1));
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    CHECK(gate.calls[0].first == 1);
    CHECK(gate.calls[0].second != std::this_thread::get_id());
  }
  CHECK((*np)->publisher().latest_version() == 0);
  CHECK((*np)->stats().versions_converted == 0);

  // The trainer never waits for the converter: two more versions while it
  // is held; 2 waits, then 3 replaces it.
  auto second = (*np)->publish(2, v2.data(), v2.size());
  REQUIRE(second.ok());
  CHECK(second->replaced_version == 0);
  auto third = (*np)->publish(3, v3.data(), v3.size());
  REQUIRE(third.ok());
  CHECK(third->replaced_version == 2);
  CHECK((*np)->stats().versions_skipped == 1);
  auto busy = (*np)->flush(std::chrono::milliseconds(50));
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.status().code() == ErrorCode::kTimeout);

  gate.release();
  auto flushed = (*np)->flush();
  REQUIRE(flushed.ok());
  CHECK(flushed->version == 3);
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    REQUIRE(gate.calls.size() == 2);
    CHECK(gate.calls[1].first == 3);
    CHECK(gate.calls[1].second == gate.calls[0].second);
  }
  const NarrowingStats stats = (*np)->stats();
  CHECK(stats.versions_handed_over == 3);
  CHECK(stats.versions_converted == 2);
  CHECK(stats.versions_skipped == 1);
  CHECK(stats.last_committed_version == 3);

  // A subscriber gets version 3, bit-exact.
  auto sub = Subscriber::connect((*np)->publisher().address(), quick_options());
  REQUIRE(sub.ok());
  auto image = HostBuffer::allocate((*sub)->layout().total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 3);
  std::vector<unsigned char> reference((*sub)->layout().total_bytes(), 0);
  REQUIRE(narrow_image(wide, v3.data(), (*sub)->layout(), reference.data()).ok());
  CHECK(payload((*sub)->layout(), image->data()) == payload((*sub)->layout(), reference.data()));
}

TEST_CASE("narrowing publisher: flush returns the converter's errors, and so does the next publish, once",
          "[narrow][narrowing-publisher]") {
  const WeightLayout wide = wide_layout();
  auto np = NarrowingPublisher::create(wide, DType::kFloat16, local_options());
  REQUIRE(np.ok());
  const std::vector<unsigned char> source = wide_image(wide, 9);

  // Arguments are checked on the caller's thread.
  auto short_image = (*np)->publish(1, source.data(), source.size() - 4);
  REQUIRE_FALSE(short_image.ok());
  CHECK(short_image.status().code() == ErrorCode::kInvalidArgument);
  auto nothing = (*np)->flush(std::chrono::milliseconds(100));
  REQUIRE_FALSE(nothing.ok());
  CHECK(nothing.status().code() == ErrorCode::kNotReady);

  // Version 10 published around the converter: its 5 and 6 then fail there.
  std::vector<unsigned char> narrow((*np)->publisher().layout().total_bytes(), 0);
  REQUIRE((*np)->publisher().publish(10, narrow.data(), narrow.size()).ok());
  REQUIRE((*np)->publish(5, source.data(), source.size()).ok());
  auto failed = (*np)->flush();
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(failed.status().message(), Catch::Contains("version 5"));
  auto reported_once = (*np)->flush();
  REQUIRE_FALSE(reported_once.ok());
  CHECK(reported_once.status().code() == ErrorCode::kNotReady);

  REQUIRE((*np)->publish(6, source.data(), source.size()).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*np)->stats().versions_failed < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE((*np)->stats().versions_failed == 2);
  auto refused = (*np)->publish(11, source.data(), source.size());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::Contains("version 6"));
  CHECK_THAT(refused.status().message(), Catch::Contains("publish it again"));
  REQUIRE((*np)->publish(11, source.data(), source.size()).ok());
  auto flushed = (*np)->flush();
  REQUIRE(flushed.ok());
  CHECK(flushed->version == 11);

  auto backwards = (*np)->publish(11, source.data(), source.size());
  REQUIRE_FALSE(backwards.ok());
  CHECK(backwards.status().code() == ErrorCode::kInvalidArgument);

  // Creation: a narrow dtype other than bfloat16/float16, device slots.
  auto not_narrow = NarrowingPublisher::create(wide, DType::kFloat32, local_options());
  REQUIRE_FALSE(not_narrow.ok());
  CHECK(not_narrow.status().code() == ErrorCode::kInvalidArgument);
  PublisherOptions device = local_options();
  device.slot_memory = MemoryKind::kCuda;
  auto on_device = NarrowingPublisher::create(wide, DType::kBFloat16, device);
  REQUIRE_FALSE(on_device.ok());
  CHECK(on_device.status().code() == ErrorCode::kInvalidConfig);
}

TEST_CASE("narrowing publisher: destroyed with a conversion held and one waiting, it returns promptly",
          "[narrow][narrowing-publisher]") {
  Gate gate;
  HookGuard hook(gate);
  const WeightLayout wide = wide_layout(512);  // about 9 MiB of float32: several conversion chunks
  auto np = NarrowingPublisher::create(wide, DType::kBFloat16, local_options());
  REQUIRE(np.ok());
  const std::vector<unsigned char> source = wide_image(wide, 4);
  REQUIRE((*np)->publish(1, source.data(), source.size()).ok());
  REQUIRE(gate.wait_calls(1));
  REQUIRE((*np)->publish(2, source.data(), source.size()).ok());  // waits behind version 1
  auto sub = Subscriber::connect((*np)->publisher().address(), quick_options());
  REQUIRE(sub.ok());

  std::unique_ptr<NarrowingPublisher> owned = std::move(np).value();
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gate.release();
  });
  const auto start = std::chrono::steady_clock::now();
  owned.reset();  // stops the converter: version 1 is abandoned within a chunk, version 2 dropped
  const double seconds = seconds_since(start);
  opener.join();
  CHECK(seconds < 10.0);
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    CHECK(gate.calls.size() == 1);  // version 2 never reached the converter
  }
  // The subscriber's publisher is gone: nothing was committed, the connection is closed.
  auto image = HostBuffer::allocate((*sub)->layout().total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  CHECK_FALSE(pulled.ok());
}
