// WorkerPool: on-demand threads, capped, FIFO queue.
#include "publisher/worker_pool.h"

#include <exception>
#include <string>

#include "common/log.h"

namespace weightsync::detail {

Status WorkerPool::post(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return Status(ErrorCode::kConnectionLost, "the publisher is stopping");
  queue_.push_back(std::move(task));
  if (idle_ < queue_.size() && threads_.size() < max_threads_) {
    try {
      threads_.emplace_back([this] { run(); });
    } catch (const std::exception& e) {
      if (threads_.empty()) {
        queue_.pop_back();
        return Status(ErrorCode::kInternal, std::string("cannot start a worker thread: ") + e.what());
      }
      WS_WARN("publisher: cannot start another worker thread ({}); {} keep serving", e.what(),
              threads_.size());
    }
  }
  lock.unlock();
  ready_.notify_one();
  return Status();
}

void WorkerPool::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (stopping_) return;
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      WS_ERROR("publisher: a worker task failed: {}", e.what());
    } catch (...) {
      WS_ERROR("publisher: a worker task failed with an unknown exception");
    }
    task = nullptr;  // destroy captures outside the lock
    lock.lock();
  }
}

void WorkerPool::stop() {
  std::vector<std::thread> threads;
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
    dropped.swap(queue_);
  }
  ready_.notify_all();
  for (auto& t : threads) t.join();
}

std::size_t WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

}  // namespace weightsync::detail
