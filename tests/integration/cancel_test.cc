// Cancellation (weightsync/cancel.h): a pull or wait_for_version that waits
// for a version stops with kCancelled soon after a CancelToken is set from
// another thread or a poll function says so, and the Subscriber stays usable:
// the next pull delivers the next version bit-exact. And the log sink
// (weightsync/log.h) receives the library's messages instead of stderr.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {

struct Pair {
  std::unique_ptr<Publisher> publisher;
  std::unique_ptr<Subscriber> subscriber;
};

Pair connected_pair(const WeightLayout& layout, const std::string& transport) {
  PublisherOptions po;
  po.slots = 3;
  auto pub = Publisher::create(layout, po);
  REQUIRE(pub.ok());
  auto sub = Subscriber::connect((*pub)->address(), quick_options(5000, transport));
  REQUIRE(sub.ok());
  return {std::move(*pub), std::move(*sub)};
}

}  // namespace

TEST_CASE("cancel: a waiting pull returns kCancelled soon after the token is set from another thread, and the subscriber stays usable",
          "[cancel]") {
  const std::string transport = GENERATE(std::string("tcp"), std::string("shm"));
  INFO("transport " << transport);
  const auto layout = bytes_layout(1 << 20, 3);
  auto pair = connected_pair(layout, transport);
  auto dest = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(dest.ok());
  const auto destination = Destination::contiguous(dest->data(), dest->size());

  CancelToken token;
  PullOptions options;
  options.wait = std::chrono::seconds(30);
  options.cancel.token = &token;
  std::atomic<std::int64_t> cancelled_at_ns{0};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancelled_at_ns = std::chrono::steady_clock::now().time_since_epoch().count();
    token.cancel();
  });
  auto pulled = pair.subscriber->pull(destination, options);
  const auto returned_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  canceller.join();
  REQUIRE_FALSE(pulled.ok());
  CHECK(pulled.status().code() == ErrorCode::kCancelled);
  CHECK(pulled.status().action() == Action::kRetry);
  const double late_ms = (returned_ns - cancelled_at_ns.load()) / 1e6;
  INFO("returned " << late_ms << " ms after cancel()");
  CHECK(late_ms < 100.0);
  CHECK(pair.subscriber->status().ok());  // not sticky

  // A set token cancels at once; reset() lets the next pull through.
  auto again = pair.subscriber->pull(destination, options);
  CHECK(again.status().code() == ErrorCode::kCancelled);
  token.reset();
  std::vector<std::uint8_t> image(layout.total_bytes());
  fill_pattern(image.data(), image.size(), 7, 0);
  REQUIRE(pair.publisher->publish(7, image.data(), image.size()).ok());
  auto delivered = pair.subscriber->pull(destination, options);
  REQUIRE(delivered.ok());
  CHECK(delivered->version == 7);
  for (const auto& t : layout.tensors()) {
    CHECK(find_mismatch(static_cast<std::uint8_t*>(dest->data()) + t.offset, t.bytes, 7, t.offset) == -1);
  }
}

TEST_CASE("cancel: a poll function cancels a waiting pull and wait_for_version on the caller thread, and a throwing one cancels too",
          "[cancel]") {
  const auto layout = bytes_layout(4096, 1);
  auto pair = connected_pair(layout, "tcp");
  auto dest = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(dest.ok());
  const auto caller = std::this_thread::get_id();
  const auto start = std::chrono::steady_clock::now();
  int polls = 0;
  bool on_caller = true;
  PullOptions options;
  options.wait = std::chrono::seconds(30);
  options.cancel.poll = [&] {
    ++polls;
    on_caller = on_caller && std::this_thread::get_id() == caller;
    return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(150);
  };
  auto pulled = pair.subscriber->pull(Destination::contiguous(dest->data(), dest->size()), options);
  CHECK(pulled.status().code() == ErrorCode::kCancelled);
  CHECK(seconds_since(start) < 1.0);
  CHECK(polls >= 5);  // looked at every kCancelPollInterval, not once
  CHECK(on_caller);

  Cancellation throwing;
  throwing.poll = []() -> bool { throw std::runtime_error("interrupted"); };
  auto waited = pair.subscriber->wait_for_version(0, std::chrono::seconds(30), throwing);
  CHECK(waited.status().code() == ErrorCode::kCancelled);
  CHECK(pair.subscriber->status().ok());

  // Without a cancellation, a bounded wait still ends in kTimeout on time.
  const auto t0 = std::chrono::steady_clock::now();
  auto timed_out = pair.subscriber->wait_for_version(0, std::chrono::milliseconds(120));
  CHECK(timed_out.status().code() == ErrorCode::kTimeout);
  CHECK(seconds_since(t0) >= 0.11);
  CHECK(seconds_since(t0) < 2.0);
}

TEST_CASE("log sink: the library's messages go to the installed sink instead of stderr, until it is removed", "[log]") {
  struct Seen {
    std::mutex mutex;
    std::vector<std::pair<LogLevel, std::string>> lines;
  } seen;
  const LogLevel before = log_level();
  set_log_level(LogLevel::kDebug);
  set_log_sink([&seen](LogLevel level, std::string_view message) {
    std::lock_guard<std::mutex> lock(seen.mutex);
    seen.lines.emplace_back(level, std::string(message));
  });
  {
    const auto layout = bytes_layout(4096, 1);
    auto pair = connected_pair(layout, "tcp");
    (void)pair.subscriber->latest_version();
  }
  set_log_sink({});
  set_log_level(before);
  std::lock_guard<std::mutex> lock(seen.mutex);
  REQUIRE_FALSE(seen.lines.empty());
  bool any_below_warn = false;  // only there because the level was raised
  for (const auto& [level, text] : seen.lines) {
    CHECK_FALSE(text.empty());
    CHECK(text.back() != '\n');  // no prefix, no newline: the sink formats
    CHECK(text.rfind("[weightsync", 0) != 0);
    any_below_warn = any_below_warn || level >= LogLevel::kInfo;
  }
  CHECK(any_below_warn);
}

TEST_CASE("shm: a pull with nothing new is answered from the stamp page, yet sees every commit and a dead publisher",
          "[shm][cancel]") {
  const auto layout = bytes_layout(64 << 10, 2);
  auto pair = connected_pair(layout, "shm");
  auto dest = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(dest.ok());
  const auto destination = Destination::contiguous(dest->data(), dest->size());
  std::vector<std::uint8_t> image(layout.total_bytes());
  for (std::uint64_t version = 1; version <= 5; ++version) {
    // Nothing newer: kNotReady, many times, fast.
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) {
      auto none = pair.subscriber->pull(destination);
      REQUIRE(none.status().code() == ErrorCode::kNotReady);
    }
    INFO("1000 pulls with nothing new took " << seconds_since(t0) * 1e3 << " ms");
    CHECK(seconds_since(t0) < 5.0);
    fill_pattern(image.data(), image.size(), version, 0);
    REQUIRE(pair.publisher->publish(version, image.data(), image.size()).ok());
    auto pulled = pair.subscriber->pull(destination);  // the very next pull sees the commit
    REQUIRE(pulled.ok());
    CHECK(pulled->version == version);
    CHECK(find_mismatch(dest->data(), layout.tensors()[0].bytes, version, 0) == -1);
  }
  // The mapped stamps outlive the publisher; the control connection does not.
  pair.publisher.reset();
  auto after = pair.subscriber->pull(destination);
  REQUIRE_FALSE(after.ok());
  CHECK(after.status().action() == Action::kReconnect);
  CHECK_FALSE(pair.subscriber->status().ok());
}

TEST_CASE("publisher: a version query that waits 15 ms is answered after about 15 ms, not at the 50 ms sweep",
          "[cancel]") {
  // What makes cancellation prompt: a cancellable wait is a series of 10 ms
  // queries, each answered when its own deadline passes.
  const auto layout = bytes_layout(4096, 1);
  auto pair = connected_pair(layout, "tcp");
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = pair.subscriber->wait_for_version(0, std::chrono::milliseconds(15));
    CHECK(r.status().code() == ErrorCode::kTimeout);
    ms.push_back(seconds_since(t0) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  INFO("median " << ms[3] << " ms, min " << ms[0] << " ms");
  CHECK(ms[0] >= 14.0);  // never before the deadline
  CHECK(ms[3] < 40.0);
}
