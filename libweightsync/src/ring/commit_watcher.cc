// The thread that works on the newest commit and skips the rest.
#include "ring/commit_watcher.h"

#include <exception>
#include <utility>

#include "common/log.h"

namespace weightsync::detail {

CommitWatcher::CommitWatcher(std::string name) : name_(std::move(name)) {}

CommitWatcher::~CommitWatcher() {
  stop();
}

bool CommitWatcher::start(Work work) {
  std::lock_guard<std::mutex> thread_lock(thread_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_ || stopping_) return false;
  }
  work_ = std::move(work);
  thread_ = std::thread([this] { run(); });  // throws std::system_error: nothing started
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
  return true;
}

void CommitWatcher::committed(std::uint32_t slot, std::uint64_t stamp) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopping_) return;
    ++counters_.committed;
    if (waiting_) ++counters_.skipped;  // never worked on: a newer commit came first
    waiting_ = true;
    slot_ = slot;
    stamp_ = stamp;
  }
  cv_.notify_all();
}

bool CommitWatcher::interrupted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_ || waiting_;
}

void CommitWatcher::stop() {
  std::lock_guard<std::mutex> thread_lock(thread_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CommitWatcher::Counters CommitWatcher::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void CommitWatcher::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || waiting_; });
    if (stopping_) return;
    waiting_ = false;
    const std::uint32_t slot = slot_;
    const std::uint64_t stamp = stamp_;
    lock.unlock();
    bool failed = true;
    try {
      work_(slot, stamp);
      failed = false;
    } catch (const std::exception& e) {
      WS_WARN("{} of version {} failed: {}", name_, stamp >> 1, e.what());
    } catch (...) {
      WS_WARN("{} of version {} failed: an unknown exception", name_, stamp >> 1);
    }
    lock.lock();
    ++counters_.worked;
    if (failed) ++counters_.failed;
  }
}

}  // namespace weightsync::detail
