// DevicePublishQueue: enqueue on the trainer's thread, commit on our own.
#include "publisher/device_publish.h"

#include "common/log.h"

namespace weightsync::detail {

Result<std::unique_ptr<DevicePublishQueue>> DevicePublishQueue::create(std::unique_ptr<AsyncCopier> copier,
                                                                       CommitFn commit, AbandonFn abandon) {
  std::unique_ptr<DevicePublishQueue> queue(
      new DevicePublishQueue(std::move(copier), std::move(commit), std::move(abandon)));
  queue->thread_ = std::thread([q = queue.get()] { q->run(); });
  return queue;
}

DevicePublishQueue::~DevicePublishQueue() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // The slot memory is freed after us: the copy in flight must end first.
    cv_.wait(lock, [this] { return !in_flight_; });
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DevicePublishQueue::run() {
  for (;;) {
    DeviceCopyJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || pending_.has_value(); });
      if (!pending_) return;
      job = *pending_;
      pending_.reset();
    }
    Result<PublishResult> result = Status(ErrorCode::kInternal, "not committed");
    try {
      Status copied = copier_->wait();
      if (copied.ok()) {
        result = commit_(job);
      } else {
        abandon_(job);
        result = Status(copied.code(), "device publish of version " + std::to_string(job.version) +
                                           " failed, the version was not published: " + copied.message());
        WS_ERROR("publisher: {}", result.status().message());
      }
    } catch (const std::exception& e) {
      abandon_(job);
      result = Status(ErrorCode::kInternal, std::string("device publish: ") + e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_ = std::move(result);
      last_reported_ = false;
      in_flight_ = false;
    }
    cv_.notify_all();
  }
}

Status DevicePublishQueue::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !in_flight_; })) {
    return Status(ErrorCode::kTimeout, "the previous device publish has not completed within " +
                                           std::to_string(timeout.count()) + " ms (is the GPU stuck?)");
  }
  if (last_ && !last_reported_ && !last_->ok()) {
    last_reported_ = true;
    return last_->status();
  }
  return Status();
}

Status DevicePublishQueue::enqueue(const DeviceCopyJob& job, void* caller_stream,
                                   const std::vector<DeviceCopy>& copies) {
  if (Status s = copier_->enqueue(caller_stream, copies); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = job;
    in_flight_ = true;
  }
  cv_.notify_all();
  return Status();
}

Status DevicePublishQueue::order_after(void* stream) const {
  // Batches are enqueued by the publishing thread only, the thread that
  // calls this: no lock needed. A completed batch makes this a no-op.
  return copier_->order_after(stream);
}

Result<PublishResult> DevicePublishQueue::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !in_flight_; })) {
    return Status(ErrorCode::kTimeout, "the device publish in flight has not completed within " +
                                           std::to_string(timeout.count()) + " ms");
  }
  if (!last_) return Status(ErrorCode::kNotReady, "no device publish was enqueued");
  last_reported_ = true;
  return *last_;
}

}  // namespace weightsync::detail
