// CommitWatcher: the newest commit is worked on and the ones superseded
// meanwhile are skipped (and counted), committed() never waits for the work,
// stop() joins while work runs and drops a waiting commit, interrupted()
// reports a newer commit, and a throwing work is counted and survived.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ring/commit_watcher.h"

using namespace weightsync::detail;

namespace {

constexpr auto kPatience = std::chrono::seconds(10);

// A one-way gate: wait() blocks until open() (or returns false after `limit`).
class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds limit = kPatience) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// What the work saw, one entry per call.
struct Seen {
  std::mutex mu;
  std::vector<std::uint64_t> stamps;
  void add(std::uint64_t stamp) {
    std::lock_guard<std::mutex> lock(mu);
    stamps.push_back(stamp);
  }
  std::vector<std::uint64_t> get() {
    std::lock_guard<std::mutex> lock(mu);
    return stamps;
  }
};

// Waits until the watcher has finished `n` work calls.
bool wait_worked(const CommitWatcher& w, std::uint64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (w.counters().worked < n) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("commit watcher: commits that arrive while the work runs are skipped except the newest",
          "[commit_watcher]") {
  // Catch2 assertions stay on this thread: the work only records what it saw.
  Gate entered, release;
  Seen seen, slots;
  CommitWatcher w("test");
  REQUIRE(w.start([&](std::uint32_t slot, std::uint64_t stamp) {
    seen.add(stamp);
    slots.add(slot);
    if (stamp == (1u << 1)) {
      entered.open();
      release.wait();
    }
  }));
  w.committed(1 % 3, 1u << 1);
  REQUIRE(entered.wait());
  for (std::uint64_t v = 2; v <= 10; ++v) w.committed(static_cast<std::uint32_t>(v % 3), v << 1);
  release.open();
  REQUIRE(wait_worked(w, 2));
  // Version 1 (in hand), then only version 10: 2..9 were superseded while they waited.
  CHECK(seen.get() == std::vector<std::uint64_t>{1u << 1, 10u << 1});
  CHECK(slots.get() == std::vector<std::uint64_t>{1 % 3, 10 % 3});  // each with its own slot
  const auto c = w.counters();
  CHECK(c.committed == 10);
  CHECK(c.worked == 2);
  CHECK(c.skipped == 8);
  CHECK(c.failed == 0);
  // Idle again: the next commit is worked on, nothing skipped.
  w.committed(11 % 3, 11u << 1);
  REQUIRE(wait_worked(w, 3));
  CHECK(seen.get().back() == (11u << 1));
  CHECK(w.counters().skipped == 8);
  w.stop();
  CHECK(w.counters().worked == 3);
}

TEST_CASE("commit watcher: committed() returns at once while the work is blocked", "[commit_watcher]") {
  Gate entered, release;
  CommitWatcher w("test");
  REQUIRE(w.start([&](std::uint32_t, std::uint64_t stamp) {
    if (stamp == (1u << 1)) {
      entered.open();
      release.wait();
    }
  }));
  w.committed(0, 1u << 1);
  REQUIRE(entered.wait());
  // The publishing thread commits 1000 times while the work cannot finish.
  auto publishing = std::async(std::launch::async, [&] {
    for (std::uint64_t v = 2; v <= 1001; ++v) w.committed(static_cast<std::uint32_t>(v % 4), v << 1);
  });
  const bool returned = publishing.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  release.open();  // also unblocks a watcher that (wrongly) made committed() wait for the work
  publishing.wait();
  CHECK(returned);
  REQUIRE(wait_worked(w, 2));  // version 1, then the newest (1001)
  const auto c = w.counters();
  CHECK(c.committed == 1001);
  CHECK(c.skipped == 999);
  CHECK(c.worked == 2);
}

TEST_CASE("commit watcher: stop() waits for the work in hand and drops a waiting commit",
          "[commit_watcher]") {
  Gate entered, release;
  Seen seen;
  bool interrupted_after_stop = false;
  CommitWatcher w("test");
  REQUIRE(w.start([&](std::uint32_t, std::uint64_t stamp) {
    seen.add(stamp);
    entered.open();
    release.wait();
    interrupted_after_stop = w.interrupted();
  }));
  w.committed(0, 1u << 1);
  REQUIRE(entered.wait());
  w.committed(1, 2u << 1);  // waits behind the work in hand
  auto stopping = std::async(std::launch::async, [&] { w.stop(); });
  // stop() must not return while the work runs (it joins the thread).
  CHECK(stopping.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  release.open();
  REQUIRE(stopping.wait_for(kPatience) == std::future_status::ready);
  stopping.get();
  CHECK(interrupted_after_stop);                             // read on the watcher's thread, joined by stop()
  CHECK(seen.get() == std::vector<std::uint64_t>{1u << 1});  // version 2 was dropped, not worked on
  auto c = w.counters();
  CHECK(c.committed == 2);
  CHECK(c.worked == 1);
  CHECK(c.skipped == 0);  // dropped by stop(), not superseded
  // After stop(): commits are ignored, start() starts nothing, stop() again is harmless.
  w.committed(2, 3u << 1);
  CHECK(w.counters().committed == 2);
  CHECK_FALSE(w.start([](std::uint32_t, std::uint64_t) {}));
  w.stop();
}

TEST_CASE("commit watcher: an idle watcher stops at once, and commits before start() are ignored",
          "[commit_watcher]") {
  Seen seen;
  {
    CommitWatcher w("test");
    w.committed(0, 1u << 1);  // not started: nothing recorded
    CHECK(w.counters().committed == 0);
    REQUIRE(w.start([&](std::uint32_t, std::uint64_t stamp) { seen.add(stamp); }));
    CHECK_FALSE(w.start([&](std::uint32_t, std::uint64_t) { seen.add(0); }));  // once only
    w.committed(1, 2u << 1);
    REQUIRE(wait_worked(w, 1));
    CHECK(seen.get() == std::vector<std::uint64_t>{2u << 1});
    const auto start = std::chrono::steady_clock::now();
    w.stop();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  }
  // The destructor stops a watcher never stopped.
  CommitWatcher never_stopped("test");
  REQUIRE(never_stopped.start([](std::uint32_t, std::uint64_t) {}));
}

TEST_CASE("commit watcher: interrupted() says whether a newer commit waits", "[commit_watcher]") {
  Gate entered, committed_again;
  std::vector<bool> interrupted;  // written by the watcher's thread; read after stop() joined it
  CommitWatcher w("test");
  REQUIRE(w.start([&](std::uint32_t, std::uint64_t stamp) {
    interrupted.push_back(w.interrupted());
    if (stamp == (1u << 1)) {
      entered.open();
      committed_again.wait();
      interrupted.push_back(w.interrupted());
    }
  }));
  CHECK_FALSE(w.interrupted());
  w.committed(0, 1u << 1);
  REQUIRE(entered.wait());
  w.committed(1, 2u << 1);
  committed_again.open();
  REQUIRE(wait_worked(w, 2));
  w.stop();
  // Version 1: nothing newer, then version 2 waiting; version 2: nothing newer.
  CHECK(interrupted == std::vector<bool>{false, true, false});
}

TEST_CASE("commit watcher: work that throws is counted, and the thread goes on", "[commit_watcher]") {
  Seen seen;
  CommitWatcher w("test");
  REQUIRE(w.start([&](std::uint32_t, std::uint64_t stamp) {
    seen.add(stamp);
    if (stamp == (1u << 1)) throw std::runtime_error("boom");
    if (stamp == (2u << 1)) throw 42;  // not a std::exception
  }));
  for (std::uint64_t v = 1; v <= 3; ++v) {
    w.committed(0, v << 1);
    REQUIRE(wait_worked(w, v));
  }
  CHECK(seen.get() == std::vector<std::uint64_t>{1u << 1, 2u << 1, 3u << 1});
  const auto c = w.counters();
  CHECK(c.worked == 3);
  CHECK(c.failed == 2);
  CHECK(c.skipped == 0);
}
