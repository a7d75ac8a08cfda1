// WorkerPool: a bounded set of threads that run the publisher's blocking work
// (a control request's reply, a tcp READ streamed from slot memory, handing a
// local subscriber its descriptors). Threads are started on demand, when a
// task is queued and none is idle, up to `max_threads`, and then kept; past
// that, tasks wait in FIFO order. So the thread count depends on how much work
// runs at once, never on how many connections are open.
//
// Threads: post() from any thread. stop() (also run by the destructor) lets
// the running tasks finish, drops the queued ones (each is destroyed
// unrun) and joins every thread. A task must not throw: the pool catches and
// logs anything that escapes.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "weightsync/status.h"

namespace weightsync::detail {

class WorkerPool {
 public:
  explicit WorkerPool(std::size_t max_threads) : max_threads_(max_threads == 0 ? 1 : max_threads) {}
  ~WorkerPool() { stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // kInternal if a thread was needed and could not be started and none runs;
  // kConnectionLost after stop().
  Status post(std::function<void()> task);
  void stop();
  std::size_t threads() const;

 private:
  void run();

  const std::size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace weightsync::detail
