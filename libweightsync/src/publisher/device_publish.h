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
// failure of the previous job, once. Threads: enqueue/wait_idle/flush from
// the publishing thread; commit/abandon run on the commit thread. The
// destructor waits for the job in flight, then joins the thread.
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

  static Result<std::unique_ptr<DevicePublishQueue>> create(std::unique_ptr<AsyncCopier> copier,
                                                            CommitFn commit, AbandonFn abandon);
  ~DevicePublishQueue();
  DevicePublishQueue(const DevicePublishQueue&) = delete;
  DevicePublishQueue& operator=(const DevicePublishQueue&) = delete;

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
  DevicePublishQueue(std::unique_ptr<AsyncCopier> copier, CommitFn commit, AbandonFn abandon)
      : copier_(std::move(copier)), commit_(std::move(commit)), abandon_(std::move(abandon)) {}
  void run();

  std::unique_ptr<AsyncCopier> copier_;
  CommitFn commit_;
  AbandonFn abandon_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<DeviceCopyJob> pending_;
  bool in_flight_ = false;
  bool stopping_ = false;
  std::optional<Result<PublishResult>> last_;
  bool last_reported_ = true;
  std::thread thread_;
};

}  // namespace weightsync::detail
