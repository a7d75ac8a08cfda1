// DevicePublishQueue: enqueue on the trainer's thread, commit on our own.
#include "publisher/device_publish.h"

#include <algorithm>

#include "common/log.h"

namespace weightsync::detail {

Result<std::unique_ptr<DevicePublishQueue>> DevicePublishQueue::create(
    std::unique_ptr<AsyncCopier> copier, CommitFn commit, AbandonFn abandon,
    std::chrono::milliseconds stop_timeout) {
  auto state = std::make_shared<State>();
  state->copier = std::move(copier);
  state->commit = std::move(commit);
  state->abandon = std::move(abandon);
  // Bounded so that the destructor's wait_for cannot overflow the clock.
  const auto bound = std::clamp<std::chrono::milliseconds>(stop_timeout, std::chrono::milliseconds(0),
                                                           std::chrono::hours(24));
  std::unique_ptr<DevicePublishQueue> queue(new DevicePublishQueue(state, bound));
  queue->thread_ = std::thread([state] { run(state); });
  return queue;
}

DevicePublishQueue::~DevicePublishQueue() {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, stop_timeout_, [this] { return !state_->copying; })) {
    // The copy may still write into the slot and its pinned pages: leave the
    // commit thread, the copier and the pins behind rather than free them.
    state_->orphaned = true;
    lock.unlock();
    WS_ERROR(
        "publisher: a device publish copy is still running {} ms after the publisher was closed (is the GPU "
        "stuck?); leaking its page-locked slots and copy engine instead of freeing memory the copy may "
        "still write. Check the GPU (nvidia-smi) and restart the process.",
        stop_timeout_.count());
    thread_.detach();
    return;
  }
  // The copy is over; a commit or abandon in progress is host work: let it end.
  state_->cv.wait(lock, [this] { return !state_->in_flight; });
  state_->stopping = true;
  lock.unlock();
  state_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DevicePublishQueue::hold_until_copies_end(std::vector<std::unique_ptr<HostPin>> pins) {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (auto& pin : pins) state_->pins.push_back(std::move(pin));
}

void DevicePublishQueue::run(const std::shared_ptr<State>& state) {
  for (;;) {
    DeviceCopyJob job;
    {
      std::unique_lock<std::mutex> lock(state->mu);
      state->cv.wait(lock, [&] { return state->stopping || state->pending.has_value(); });
      if (!state->pending) return;
      job = *state->pending;
      state->pending.reset();
    }
    Status copied;
    try {
      copied = state->copier->wait();
    } catch (const std::exception& e) {
      copied = Status(ErrorCode::kInternal, std::string("waiting for the device copy: ") + e.what());
    }
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->orphaned) {
        WS_ERROR("publisher: the device copy of version {} ended after its publisher was closed; dropped",
                 job.version);
        return;  // the publisher (commit, abandon, ring) is gone
      }
      state->copying = false;
    }
    state->cv.notify_all();
    Result<PublishResult> result = finish_job(*state, job, copied);
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->last = std::move(result);
      state->last_reported = false;
      state->in_flight = false;
    }
    state->cv.notify_all();
  }
}

Result<PublishResult> DevicePublishQueue::finish_job(State& state, const DeviceCopyJob& job,
                                                     const Status& copied) {
  try {
    if (copied.ok()) return state.commit(job);
    state.abandon(job);
    Status failed(copied.code(), "device publish of version " + std::to_string(job.version) +
                                     " failed, the version was not published: " + copied.message());
    WS_ERROR("publisher: {}", failed.message());
    return failed;
  } catch (const std::exception& e) {
    state.abandon(job);
    return Status(ErrorCode::kInternal, std::string("device publish: ") + e.what());
  }
}

Status DevicePublishQueue::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [this] { return !state_->in_flight; })) {
    return Status(ErrorCode::kTimeout, "the previous device publish has not completed within " +
                                           std::to_string(timeout.count()) + " ms (is the GPU stuck?)");
  }
  if (state_->last && !state_->last_reported && !state_->last->ok()) {
    state_->last_reported = true;
    return state_->last->status();
  }
  return Status();
}

Status DevicePublishQueue::enqueue(const DeviceCopyJob& job, void* caller_stream,
                                   const std::vector<DeviceCopy>& copies) {
  if (Status s = state_->copier->enqueue(caller_stream, copies); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->pending = job;
    state_->in_flight = true;
    state_->copying = true;
  }
  state_->cv.notify_all();
  return Status();
}

Status DevicePublishQueue::order_after(void* stream) const {
  // Batches are enqueued by the publishing thread only, the thread that
  // calls this: no lock needed. A completed batch makes this a no-op.
  return state_->copier->order_after(stream);
}

Result<PublishResult> DevicePublishQueue::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [this] { return !state_->in_flight; })) {
    return Status(ErrorCode::kTimeout, "the device publish in flight has not completed within " +
                                           std::to_string(timeout.count()) + " ms");
  }
  if (!state_->last) return Status(ErrorCode::kNotReady, "no device publish was enqueued");
  state_->last_reported = true;
  return *state_->last;
}

}  // namespace weightsync::detail
