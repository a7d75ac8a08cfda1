// DevicePublishQueue: the asynchronous half of Publisher::publish_from_device.
//
// The trainer's thread enqueues a job: the copies from device memory into a
// reserved slot, through an AsyncCopier (cuda/device_backend.h: the CUDA one
// copies on its own stream, ordered after the work already queued on the
// caller's stream). The queue's commit thread waits for the copies to
// complete and then runs `commit` (the version becomes visible to readers)
// or, if the copies failed, `abandon`.
//
// At most one job is in flight: the trainer calls wait_idle() before it
// reserves the next slot (every publish path does), which also hands it the
// failure of the previous job, once. Threads: enqueue/wait_idle/flush/
// hold_until_copies_end from the publishing thread; commit/abandon run on the
// commit thread.
//
// Destruction is bounded: the destructor waits at most `stop_timeout` (given
// to create()) for the copy in flight to complete. A commit or abandon that
// has started is host work and is always waited for. If the copy is still
// running when the bound passes (a stuck GPU), the destructor logs an error
// and returns without waiting further, and the memory the copy could still
// write is deliberately leaked, never freed under it: the commit thread is
// detached and keeps the copier and the pins given to hold_until_copies_end()
// (the page-locking of the host slots, which keeps their physical pages
// resident for the device) until the copy ends, if it ever does; it then
// drops them without calling commit or abandon (their owner is gone).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cuda/device_backend.h"
#include "weightsync/publisher.h"

namespace weightsync::detail {

struct DeviceCopyJob {
  std::uint64_t version = 0;
  std::uint32_t slot = 0;
  std::uint32_t revoked = 0;
  std::chrono::steady_clock::time_point started;
};

class DevicePublishQueue {
 public:
  using CommitFn = std::function<Result<PublishResult>(const DeviceCopyJob&)>;
  using AbandonFn = std::function<void(const DeviceCopyJob&)>;
  // The publisher's default io timeout (PublisherOptions::io_timeout_ms).
  static constexpr std::chrono::milliseconds kDefaultStopTimeout{10000};

  // `stop_timeout`: how long the destructor waits for a copy in flight
  // (the publisher's io timeout).
  static Result<std::unique_ptr<DevicePublishQueue>> create(
      std::unique_ptr<AsyncCopier> copier, CommitFn commit, AbandonFn abandon,
      std::chrono::milliseconds stop_timeout = kDefaultStopTimeout);
  ~DevicePublishQueue();
  DevicePublishQueue(const DevicePublishQueue&) = delete;
  DevicePublishQueue& operator=(const DevicePublishQueue&) = delete;

  // Takes objects that keep the copies' destination memory usable by the
  // device (the host slots' pins). They are released after the commit thread
  // has ended, that is after the last copy is known to be complete; leaked
  // if the destructor gave up on a stuck copy.
  void hold_until_copies_end(std::vector<std::unique_ptr<HostPin>> pins);

  // Waits until no job is in flight. kTimeout if one still is; otherwise the
  // failure of the last job if it was not reported yet, else OK.
  Status wait_idle(std::chrono::milliseconds timeout);
  // Precondition: idle (wait_idle returned OK). On error nothing is in
  // flight and the caller still owns the reservation.
  Status enqueue(const DeviceCopyJob& job, void* caller_stream, const std::vector<DeviceCopy>& copies);
  // Makes `stream` wait on the device for the last enqueued copies.
  Status order_after(void* stream) const;
  // Waits for the job in flight; its result (kNotReady if none ever ran).
  Result<PublishResult> flush(std::chrono::milliseconds timeout);

 private:
  // Everything the commit thread touches: shared, so that it stays valid
  // for a thread the destructor had to leave behind.
  struct State {
    std::unique_ptr<AsyncCopier> copier;
    CommitFn commit;
    AbandonFn abandon;
    std::vector<std::unique_ptr<HostPin>> pins;

    std::mutex mu;
    std::condition_variable cv;
    std::optional<DeviceCopyJob> pending;
    bool in_flight = false;  // enqueued, not yet committed or abandoned
    bool copying = false;    // enqueued, the copier has not reported completion yet
    bool stopping = false;
    bool orphaned = false;  // the destructor gave up on the copy: never call commit/abandon
    std::optional<Result<PublishResult>> last;
    bool last_reported = true;
  };

  DevicePublishQueue(std::shared_ptr<State> state, std::chrono::milliseconds stop_timeout)
      : state_(std::move(state)), stop_timeout_(stop_timeout) {}
  static void run(const std::shared_ptr<State>& state);
  static Result<PublishResult> finish_job(State& state, const DeviceCopyJob& job, const Status& copied);

  std::shared_ptr<State> state_;
  std::chrono::milliseconds stop_timeout_;
  std::thread thread_;
};

}  // namespace weightsync::detail
