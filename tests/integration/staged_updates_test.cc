// Staged updates (weightsync/staged_updates.h): a real Publisher, real
// Subscribers over tcp and shm, a real relay. The engine's live weights hold
// one whole version at every moment: the background pull never writes them,
// an install makes live only a version pulled whole and verified, and a pull
// that fails (a half-pulled version, a killed connection) leaves the live
// version serving.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "host_staging.h"
#include "peers.h"
#include "weightsync/weightsync.h"

using namespace weightsync;
using namespace wstest;

namespace {

const char* const kSecret = "staged-updates-secret";

PublisherOptions publisher_options(std::size_t slots = 4, bool deltas = false) {
  PublisherOptions o;
  o.secret = kSecret;
  o.checksum = true;
  o.slots = slots;
  o.deltas = deltas;
  o.io_timeout_ms = 3000;
  return o;
}

std::unique_ptr<Publisher> make_publisher(const WeightLayout& layout,
                                          PublisherOptions options = publisher_options()) {
  auto p = Publisher::create(layout, options);
  INFO(p.status().to_string());
  REQUIRE(p.ok());
  return std::move(*p);
}

std::unique_ptr<Subscriber> connect(const std::string& address, const std::string& transport = "tcp") {
  auto options = quick_options(3000, transport);
  options.secret = kSecret;
  auto s = Subscriber::connect(address, options);
  INFO(s.status().to_string());
  REQUIRE(s.ok());
  return std::move(*s);
}

std::unique_ptr<StagedUpdates> make_staged(std::unique_ptr<Subscriber> sub, StagedUpdatesOptions options) {
  auto staged = StagedUpdates::create(std::move(sub), std::move(options));
  INFO(staged.status().to_string());
  REQUIRE(staged.ok());
  return std::move(*staged);
}

// Waits until `version` (or a newer one) is staged, and installs it.
InstallResult install_version(StagedUpdates& staged, std::uint64_t version) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto ready = staged.wait_staged(std::chrono::milliseconds(2000));
    INFO(ready.status().to_string());
    REQUIRE(ready.ok());
    auto installed = staged.install();
    INFO(installed.status().to_string());
    REQUIRE(installed.ok());
    if (installed->version >= version) return *installed;
    REQUIRE(std::chrono::steady_clock::now() < until);
  }
}

// Blocks the background pull inside its transfer until released.
class PullGate {
 public:
  std::function<void(std::uint64_t, std::uint64_t)> hook() {
    return [this](std::uint64_t, std::uint64_t) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!closed_) return;
      held_ = true;
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !closed_; });
      if (throw_) throw std::runtime_error("the engine's progress hook failed");
    };
  }
  void close(bool then_throw = false) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    held_ = false;
    throw_ = then_throw;
  }
  bool wait_held() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return held_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false, held_ = false, throw_ = false;
};

}  // namespace

TEST_CASE("staged updates: swap: the live buffer always holds one whole version while the next is pulled",
          "[staged]") {
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm");
  const WeightLayout layout = bytes_layout(1 << 20, 3);
  auto publisher = make_publisher(layout);
  publish_pattern(*publisher, 1);
  auto staged = make_staged(connect(publisher->address(), transport), {});
  CHECK(staged->transport() == transport);
  CHECK(staged->live_version() == 0);
  REQUIRE(staged->live_bytes() == layout.total_bytes());
  void* before = staged->live_data();
  InstallResult first = install_version(*staged, 1);
  CHECK(first.previous == 0);
  CHECK(first.mode == InstallMode::kSwap);
  CHECK(first.pull.checksum_verified);
  CHECK(staged->live_data() != before);  // the staged buffer became the live one
  CHECK(image_mismatch(layout, staged->live_data(), 1) == -1);
  CHECK(staged->tensor("t1") == static_cast<char*>(staged->live_data()) + layout.find("t1")->offset);
  CHECK(staged->tensor("nope") == nullptr);

  // The trainer publishes 2..40 while the engine reads its live weights and
  // installs whenever something is staged: every read sees exactly the live
  // version, whole (the background pull writes only the other buffer).
  constexpr std::uint64_t kLast = 40;
  std::thread trainer([&] {
    for (std::uint64_t v = 2; v <= kLast; ++v) {
      publish_pattern(*publisher, v);
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  });
  int reads = 0, installs = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (staged->live_version() < kLast && std::chrono::steady_clock::now() < until) {
    const std::uint64_t live = staged->live_version();
    const std::int64_t bad = image_mismatch(layout, staged->live_data(), live);
    ++reads;
    if (bad != -1) {
      trainer.join();
      FAIL("read " << reads << ": the live buffer is not version " << live << " at byte " << bad);
    }
    auto installed = staged->install();
    if (installed.ok()) {
      ++installs;
      CHECK(installed->previous == live);
      CHECK(installed->version > live);
    } else {
      CHECK(installed.status().code() == ErrorCode::kNotReady);
    }
  }
  trainer.join();
  CHECK(staged->live_version() == kLast);
  CHECK(image_mismatch(layout, staged->live_data(), kLast) == -1);
  CHECK(installs >= 2);
  const StagedUpdatesStats stats = staged->stats();
  CHECK(stats.installs == static_cast<std::uint64_t>(installs) + 1);
  CHECK(stats.blocked.count == stats.installs);
  CHECK(stats.blocked.max_seconds >= stats.blocked.median_seconds);
  CHECK(stats.failed_pulls == 0);
  CHECK(stats.subscriber.pulls == stats.staged);
  CHECK(staged->status().ok());
}

TEST_CASE(
    "staged updates: copy: versions land at the engine's fixed addresses, the pause reported apart from the "
    "pull",
    "[staged]") {
  const WeightLayout layout = bytes_layout(3 << 20, 4);
  auto publisher = make_publisher(layout);
  SECTION("scatter: one buffer per tensor") {
    ScatterBuffers live = allocate_scatter(layout);
    std::vector<void*> addresses;
    for (const auto& e : live.entries) addresses.push_back(e.data);
    StagedUpdatesOptions options;
    options.mode = InstallMode::kCopy;
    options.live = Destination::scatter(live.entries);
    auto staged = make_staged(connect(publisher->address()), options);
    CHECK(staged->live_data() == nullptr);
    for (std::uint64_t v = 1; v <= 3; ++v) {
      publish_pattern(*publisher, v);
      InstallResult r = install_version(*staged, v);
      CHECK(r.mode == InstallMode::kCopy);
      CHECK(r.blocked_seconds > 0.0);
      CHECK(r.pull.seconds > 0.0);
      CHECK(r.pull.bytes == layout.payload_bytes());
      for (std::size_t i = 0; i < live.entries.size(); ++i) {
        const TensorEntry* t = layout.find(live.entries[i].name);
        CHECK(live.entries[i].data == addresses[i]);
        CHECK(find_mismatch(live.entries[i].data, t->bytes, v, t->offset) == -1);
      }
    }
    CHECK(staged->stats().blocked.count == 3);
  }
  SECTION("contiguous: one copy") {
    auto live = HostBuffer::allocate(layout.total_bytes());
    REQUIRE(live.ok());
    StagedUpdatesOptions options;
    options.mode = InstallMode::kCopy;
    options.live = Destination::contiguous(live->data(), live->size());
    auto staged = make_staged(connect(publisher->address(), "shm"), options);
    publish_pattern(*publisher, 7);
    InstallResult r = install_version(*staged, 7);
    CHECK(r.version == 7);
    CHECK(image_mismatch(layout, live->data(), 7) == -1);
  }
}

TEST_CASE("staged updates: install refuses a half-pulled version, and the live weights keep theirs",
          "[staged]") {
  const WeightLayout layout = bytes_layout(4 << 20, 2);
  auto publisher = make_publisher(layout);
  auto live = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(live.ok());
  PullGate gate;
  StagedUpdatesOptions options;
  options.mode = InstallMode::kCopy;
  options.live = Destination::contiguous(live->data(), live->size());
  options.on_progress = gate.hook();
  auto staged = make_staged(connect(publisher->address()), options);
  publish_pattern(*publisher, 1);
  install_version(*staged, 1);

  gate.close();
  publish_pattern(*publisher, 2);
  REQUIRE(gate.wait_held());  // version 2 is arriving: part of it is in the staging buffer
  auto refused = staged->install();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kNotReady);
  CHECK_THAT(refused.status().message(), Catch::Contains("in progress"));
  CHECK(staged->staged_version() == 0);
  CHECK(staged->live_version() == 1);
  CHECK(image_mismatch(layout, live->data(), 1) == -1);
  gate.open();
  InstallResult r = install_version(*staged, 2);
  CHECK(r.version == 2);
  CHECK(image_mismatch(layout, live->data(), 2) == -1);
  CHECK(staged->stats().not_ready >= 1);
}

TEST_CASE("staged updates: a pull that fails part-way leaves the live version serving", "[staged]") {
  // Larger than the kernel can hold in flight on loopback (tcp_rmem up to
  // 32 MiB, tcp_wmem 4 MiB): a publisher reset while the hook holds the pull
  // then always cuts the version short.
  const WeightLayout layout = bytes_layout(64 << 20, 2);
  auto publisher = make_publisher(layout);
  PullGate gate;
  StagedUpdatesOptions options;
  options.on_progress = gate.hook();
  auto staged = make_staged(connect(publisher->address()), options);
  publish_pattern(*publisher, 1);
  install_version(*staged, 1);
  const void* live = staged->live_data();

  SECTION("the publisher dies during the transfer") {
    gate.close();
    publish_pattern(*publisher, 2);
    REQUIRE(gate.wait_held());
    publisher.reset();  // closes every connection: the rest of version 2 never arrives
    gate.open();
  }
  SECTION("the engine's hook fails during the transfer") {
    gate.close(/*then_throw=*/true);
    publish_pattern(*publisher, 2);
    REQUIRE(gate.wait_held());
    gate.open();
  }
  auto stopped = staged->wait_staged(std::chrono::milliseconds(10000));
  REQUIRE_FALSE(stopped.ok());
  CHECK(stopped.status().code() != ErrorCode::kTimeout);
  CHECK_FALSE(staged->status().ok());
  auto refused = staged->install();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kNotReady);
  CHECK_THAT(refused.status().message(), Catch::Contains("stopped"));
  CHECK(staged->live_version() == 1);
  CHECK(staged->live_data() == live);
  CHECK(image_mismatch(layout, live, 1) == -1);
  const StagedUpdatesStats stats = staged->stats();
  CHECK(stats.failed_pulls == 1);
  CHECK(stats.installs == 1);
  CHECK_FALSE(staged->last_failure().ok());
}

TEST_CASE("staged updates: every version in turn, or the newest", "[staged]") {
  const WeightLayout layout = bytes_layout(64 << 10, 2);
  auto publisher = make_publisher(layout, publisher_options(8));
  for (std::uint64_t v = 1; v <= 5; ++v) publish_pattern(*publisher, v);
  SECTION("every_version") {
    StagedUpdatesOptions options;
    options.every_version = true;
    auto staged = make_staged(connect(publisher->address()), options);
    // The first pull takes the newest (nothing live yet); then each in turn.
    publish_pattern(*publisher, 6);
    publish_pattern(*publisher, 7);
    std::uint64_t first = install_version(*staged, 1).version;
    for (std::uint64_t v = first + 1; v <= 7; ++v) {
      InstallResult r = install_version(*staged, v);
      CHECK(r.version == v);
      CHECK(image_mismatch(layout, staged->live_data(), v) == -1);
    }
  }
  SECTION("newest") {
    auto staged = make_staged(connect(publisher->address()), {});
    CHECK(install_version(*staged, 5).version == 5);
  }
}

TEST_CASE("staged updates: deltas: the staging buffer is the base of the next version", "[staged]") {
  auto built = WeightLayout::build({{"a", DType::kBFloat16, {512, 1024}}, {"b", DType::kBFloat16, {1000}}});
  REQUIRE(built.ok());
  const WeightLayout layout = *built;
  auto publisher = make_publisher(layout, publisher_options(4, /*deltas=*/true));
  std::vector<std::uint8_t> image(layout.total_bytes(), 0);
  std::mt19937 rng(7);
  for (const auto& t : layout.tensors())
    for (std::uint64_t i = 0; i < t.bytes; ++i) image[t.offset + i] = static_cast<std::uint8_t>(rng());
  auto publish_image = [&](std::uint64_t v) {
    if (v > 1) {
      for (const auto& t : layout.tensors())
        for (std::uint64_t i = 0; i < t.bytes; i += 64) image[t.offset + i] ^= static_cast<std::uint8_t>(v);
    }
    REQUIRE(publisher->publish(v, image.data(), image.size()).ok());
  };
  const InstallMode mode = GENERATE(InstallMode::kSwap, InstallMode::kCopy);
  auto live = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(live.ok());
  StagedUpdatesOptions options;
  options.mode = mode;
  if (mode == InstallMode::kCopy) options.live = Destination::contiguous(live->data(), live->size());
  auto staged = make_staged(connect(publisher->address()), options);
  REQUIRE(staged->layout().total_bytes() == layout.total_bytes());
  int deltas = 0;
  for (std::uint64_t v = 1; v <= 5; ++v) {
    publish_image(v);
    InstallResult r = install_version(*staged, v);
    REQUIRE(r.version == v);
    if (r.pull.delta) ++deltas;
    const void* now = mode == InstallMode::kSwap ? staged->live_data() : live->data();
    CHECK(std::memcmp(now, image.data(), image.size()) == 0);
  }
  // kCopy: the staging buffer holds the live version, so 2..5 come as deltas;
  // kSwap: it holds the one before, so 3..5 do (2's base, version 0, is none).
  CHECK(deltas >= (mode == InstallMode::kCopy ? 4 : 3));
  CHECK(staged->stats().subscriber.delta_pulls == static_cast<std::uint64_t>(deltas));
}

TEST_CASE("staged updates: partial: slices staged packed, swapped or copied into place", "[staged]") {
  const WeightLayout layout = bytes_layout(1 << 20, 3);
  auto publisher = make_publisher(layout);
  const TensorEntry* t0 = layout.find("t0");
  const TensorEntry* t2 = layout.find("t2");
  // A strided slice of t0 (16 ranges of 1 KiB, 8 KiB apart) and all of t2.
  std::vector<char> strided(16 * 4096, 0), whole(t2->bytes, 0);
  std::vector<TensorSlice> slices = {{"t0", 512, 1024, 16, 8192, strided.data(), 4096},
                                     {"t2", 0, t2->bytes, 1, 0, whole.data(), 0}};
  auto check_strided = [&](const char* base, std::uint64_t step, std::uint64_t v) {
    for (std::uint64_t i = 0; i < 16; ++i)
      REQUIRE(find_mismatch(base + i * step, 1024, v, t0->offset + 512 + i * 8192) == -1);
  };
  SECTION("copy") {
    StagedUpdatesOptions options;
    options.mode = InstallMode::kCopy;
    options.live = Destination::slices(slices);
    auto staged = make_staged(connect(publisher->address()), options);
    for (std::uint64_t v = 1; v <= 2; ++v) {
      publish_pattern(*publisher, v);
      InstallResult r = install_version(*staged, v);
      CHECK(r.pull.partial);
      CHECK(r.pull.bytes == 16 * 1024 + t2->bytes);
      check_strided(strided.data(), 4096, v);
      CHECK(find_mismatch(whole.data(), t2->bytes, v, t2->offset) == -1);
    }
  }
  SECTION("swap") {
    StagedUpdatesOptions options;
    options.slices = slices;
    auto staged = make_staged(connect(publisher->address(), "shm"), options);
    REQUIRE(staged->live_bytes() == 16 * 1024 + t2->bytes);
    CHECK(staged->tensor("t0") == nullptr);
    auto second = staged->slice_offset(1);
    REQUIRE(second.ok());
    CHECK(*second == 16 * 1024);
    CHECK(staged->slice_offset(2).status().code() == ErrorCode::kInvalidArgument);
    publish_pattern(*publisher, 3);
    install_version(*staged, 3);
    const char* base = static_cast<const char*>(staged->live_data());
    check_strided(base, 1024, 3);
    CHECK(find_mismatch(base + *second, t2->bytes, 3, t2->offset) == -1);
  }
}

TEST_CASE("staged updates: through a relay", "[staged]") {
  const WeightLayout layout = bytes_layout(1 << 20, 2);
  auto trainer = make_publisher(layout);
  RelayOptions relay_options;
  relay_options.upstreams = {trainer->address()};
  relay_options.subscriber = quick_options(3000, "tcp");
  relay_options.subscriber.secret = kSecret;
  relay_options.publisher.secret = kSecret;
  relay_options.publisher.slots = 3;
  auto relay = Relay::create(relay_options);
  INFO(relay.status().to_string());
  REQUIRE(relay.ok());
  auto staged = make_staged(connect((*relay)->address()), {});
  for (std::uint64_t v = 1; v <= 3; ++v) {
    publish_pattern(*trainer, v);
    InstallResult r = install_version(*staged, v);
    CHECK(r.pull.checksum_verified);
    CHECK(image_mismatch(layout, staged->live_data(), r.version) == -1);
  }
}

TEST_CASE("staged updates: device memory (host stand-in for the GPU)", "[staged]") {
  ScopedHostStaging device;  // "device" memory is host memory; copies are memcpy
  const WeightLayout layout = bytes_layout(2 << 20, 3);
  auto publisher = make_publisher(layout);
  auto live = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(live.ok());
  const InstallMode mode = GENERATE(InstallMode::kSwap, InstallMode::kCopy);
  StagedUpdatesOptions options;
  options.mode = mode;
  options.memory = MemoryKind::kCuda;
  if (mode == InstallMode::kCopy)
    options.live = Destination::contiguous(live->data(), live->size(), MemoryKind::kCuda);
  auto staged = make_staged(connect(publisher->address()), options);
  for (std::uint64_t v = 1; v <= 2; ++v) {
    publish_pattern(*publisher, v);
    InstallResult r = install_version(*staged, v);
    CHECK(r.pull.staged);  // through the page-locked staging ring
    const void* now = mode == InstallMode::kSwap ? staged->live_data() : live->data();
    CHECK(image_mismatch(layout, now, v) == -1);
  }
}

TEST_CASE("staged updates: bad options are refused with the reason", "[staged]") {
  const WeightLayout layout = bytes_layout(64 << 10, 2);
  auto publisher = make_publisher(layout);
  auto live = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(live.ok());
  auto refused = [&](StagedUpdatesOptions options, std::unique_ptr<Subscriber> sub = nullptr) {
    if (!sub) sub = connect(publisher->address());
    auto staged = StagedUpdates::create(std::move(sub), std::move(options));
    REQUIRE_FALSE(staged.ok());
    return staged.status();
  };
  StagedUpdatesOptions swap_with_live;
  swap_with_live.live = Destination::contiguous(live->data(), live->size());
  CHECK_THAT(refused(swap_with_live).message(), Catch::Contains("use kCopy"));
  StagedUpdatesOptions copy_without_live;
  copy_without_live.mode = InstallMode::kCopy;
  CHECK_THAT(refused(copy_without_live).message(), Catch::Contains("needs the live destination"));
  StagedUpdatesOptions too_small;
  too_small.mode = InstallMode::kCopy;
  too_small.live = Destination::contiguous(live->data(), 100);
  Status small = refused(too_small);
  CHECK(small.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(small.message(), Catch::Contains("the live destination"));
  StagedUpdatesOptions wrong_kind;
  wrong_kind.mode = InstallMode::kCopy;
  wrong_kind.live = Destination::contiguous(live->data(), live->size(), MemoryKind::kCuda);
  CHECK_THAT(refused(wrong_kind).message(), Catch::Contains("StagedUpdatesOptions::memory"));
  StagedUpdatesOptions past_the_end;
  past_the_end.slices = {{"t0", 0, 1 << 20, 1, 0, nullptr, 0}};
  CHECK(refused(past_the_end).code() == ErrorCode::kInvalidArgument);
  CHECK(StagedUpdates::create(std::unique_ptr<Subscriber>(), {}).status().code() ==
        ErrorCode::kInvalidArgument);
  CHECK(StagedUpdates::create(std::unique_ptr<SubscriberGroup>(), {}).status().code() ==
        ErrorCode::kInvalidArgument);

  PublisherOptions no_checksums = publisher_options();
  no_checksums.checksum = false;
  auto unverified = make_publisher(layout, no_checksums);
  Status needs = refused({}, connect(unverified->address()));
  CHECK(needs.code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(needs.message(), Catch::Contains("require_checksum"));
  StagedUpdatesOptions accept;
  accept.require_checksum = false;
  auto staged = make_staged(connect(unverified->address()), accept);
  publish_pattern(*unverified, 1);
  CHECK_FALSE(install_version(*staged, 1).pull.checksum_verified);
}

TEST_CASE("staged updates: reconnect keeps the live version serving and resumes from the new source",
          "[staged]") {
  const WeightLayout layout = bytes_layout(1 << 20, 2);
  auto first = make_publisher(layout);
  auto staged = make_staged(connect(first->address()), {});
  publish_pattern(*first, 1);
  install_version(*staged, 1);
  first.reset();  // the trainer dies
  auto lost = staged->wait_staged(std::chrono::milliseconds(10000));
  REQUIRE_FALSE(lost.ok());
  REQUIRE_FALSE(staged->status().ok());
  CHECK(image_mismatch(layout, staged->live_data(), 1) == -1);

  // A source of another layout is refused; the object keeps what it had.
  auto other = make_publisher(bytes_layout(1 << 20, 3));
  Status refused = staged->reconnect(connect(other->address()));
  CHECK(refused.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("another layout"));
  CHECK(staged->reconnect(std::unique_ptr<Subscriber>()).code() == ErrorCode::kInvalidArgument);
  CHECK(staged->reconnect(std::unique_ptr<SubscriberGroup>()).code() == ErrorCode::kInvalidArgument);
  CHECK(image_mismatch(layout, staged->live_data(), 1) == -1);

  // The restarted trainer: the live version serves until its first version is installed.
  auto restarted = make_publisher(layout);
  publish_pattern(*restarted, 5);
  REQUIRE(staged->reconnect(connect(restarted->address(), "shm")).ok());
  CHECK(staged->status().ok());
  CHECK(staged->transport() == "shm");
  CHECK(staged->live_version() == 1);
  InstallResult r = install_version(*staged, 5);
  CHECK(r.previous == 1);
  CHECK(image_mismatch(layout, staged->live_data(), 5) == -1);

  // A source behind the live version (a trainer resumed from a checkpoint):
  // by default only a newer version is staged; with accept_older its newest is.
  restarted.reset();
  REQUIRE_FALSE(staged->wait_staged(std::chrono::milliseconds(10000)).ok());
  auto behind = make_publisher(layout);
  publish_pattern(*behind, 3);
  REQUIRE(staged->reconnect(connect(behind->address())).ok());
  auto none = staged->wait_staged(std::chrono::milliseconds(400));
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == ErrorCode::kTimeout);
  REQUIRE(staged->reconnect(connect(behind->address()), /*accept_older=*/true).ok());
  auto older = staged->wait_staged(std::chrono::milliseconds(5000));
  REQUIRE(older.ok());
  CHECK(*older == 3);
  auto back = staged->install();
  REQUIRE(back.ok());
  CHECK(back->previous == 5);
  CHECK(image_mismatch(layout, staged->live_data(), 3) == -1);
  publish_pattern(*behind, 4);  // and from there on, newer versions as usual
  CHECK(install_version(*staged, 4).version == 4);
}
