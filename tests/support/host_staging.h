// A DeviceBackend whose "device" is host memory and whose copy engines are
// threads: it lets the staged-pull windowing (libweightsync
// transport/staging_channel.h) and the device-publish pipeline
// (publisher/device_publish.h) run, bit-exact and under stress, on machines
// without a GPU.
// - HostStagingEngine: each chunk's copies run on the engine's thread after
//   `delay` (to widen any window where a chunk could be reused before its
//   copies are done); wait(i) blocks until chunk i's copies have run.
// - HostAsyncCopier: each batch runs on its thread after `delay`; a batch can
//   be made to fail (CopierControl::fail_next), as a failed cudaMemcpyAsync.
// Install with ScopedHostStaging (restores CUDA when it ends).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda/device_backend.h"
#include "weightsync/memory.h"

namespace wstest {

class HostStagingEngine final : public weightsync::detail::StagingEngine {
 public:
  HostStagingEngine(std::size_t chunks, std::size_t chunk_bytes, std::chrono::microseconds delay)
      : chunk_bytes_(chunk_bytes), delay_(delay), pending_(chunks, 0) {
    for (std::size_t i = 0; i < chunks; ++i) chunks_.push_back(std::vector<char>(chunk_bytes));
    worker_ = std::thread([this] { run(); });
  }
  ~HostStagingEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  std::size_t chunk_count() const override { return chunks_.size(); }
  std::size_t chunk_bytes() const override { return chunk_bytes_; }
  char* chunk(std::size_t index) override { return chunks_[index].data(); }

  weightsync::Status copy_out(std::size_t index,
                              const std::vector<weightsync::detail::ChunkCopy>& copies) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_[index];
      jobs_.push_back(Job{index, copies});
    }
    cv_.notify_all();
    return {};
  }

  weightsync::Status wait(std::size_t index) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_[index] == 0; });
    return {};
  }

 private:
  struct Job {
    std::size_t chunk;
    std::vector<weightsync::detail::ChunkCopy> copies;
  };

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      for (const auto& c : job.copies)
        std::memcpy(c.dest, chunks_[job.chunk].data() + c.chunk_offset, c.bytes);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_[job.chunk];
      }
      cv_.notify_all();
    }
  }

  std::vector<std::vector<char>> chunks_;
  std::size_t chunk_bytes_;
  std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<int> pending_;
  bool stopping_ = false;
  std::thread worker_;
};

// Shared with the test: makes the next batch of the copiers fail.
struct CopierControl {
  std::mutex mu;
  bool fail_next = false;
  int batches = 0;  // batches run (or failed)
};

class HostAsyncCopier final : public weightsync::detail::AsyncCopier {
 public:
  HostAsyncCopier(std::chrono::microseconds delay, std::shared_ptr<CopierControl> control)
      : delay_(delay), control_(std::move(control)) {}
  ~HostAsyncCopier() override {
    if (worker_.joinable()) worker_.join();
  }

  weightsync::Status enqueue(void*, const std::vector<weightsync::detail::DeviceCopy>& copies) override {
    if (worker_.joinable()) worker_.join();  // the previous batch (already waited for)
    bool fail = false;
    {
      std::lock_guard<std::mutex> lock(control_->mu);
      fail = control_->fail_next;
      control_->fail_next = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = false;
    }
    worker_ = std::thread([this, copies, fail] {
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      weightsync::Status status;
      if (fail) {
        status = weightsync::Status(weightsync::ErrorCode::kInternal, "injected copy failure");
      } else {
        for (const auto& c : copies) std::memcpy(c.dest, c.source, c.bytes);
      }
      {
        std::lock_guard<std::mutex> lock(control_->mu);
        ++control_->batches;
      }
      std::lock_guard<std::mutex> lock(mu_);
      status_ = status;
      done_ = true;
      cv_.notify_all();
    });
    return {};
  }

  weightsync::Status wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

  // No streams here: the only way to order after the batch is to wait for it.
  weightsync::Status order_after(void*) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return {};
  }

 private:
  std::chrono::microseconds delay_;
  std::shared_ptr<CopierControl> control_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = true;
  weightsync::Status status_;
  std::thread worker_;
};

// "Device" memory that is host memory, zero-filled like cudaMalloc'd staging.
class HostDeviceAllocation final : public weightsync::detail::DeviceAllocation {
 public:
  explicit HostDeviceAllocation(std::size_t bytes) : bytes_(bytes, 0) {}
  void* data() override { return bytes_.data(); }

 private:
  std::vector<char> bytes_;
};

inline weightsync::detail::DeviceBackend host_staging_backend(
    std::chrono::microseconds delay = std::chrono::microseconds(0),
    std::shared_ptr<CopierControl> control = std::make_shared<CopierControl>()) {
  weightsync::detail::DeviceBackend backend;
  backend.check_device_memory = [](const void* p, std::size_t n, const char* what) {
    if (p == nullptr || n == 0)
      return weightsync::Status(weightsync::ErrorCode::kInvalidArgument, std::string(what) + " is empty");
    return weightsync::Status();
  };
  backend.make_staging = [delay](std::size_t chunks, std::size_t chunk_bytes)
      -> weightsync::Result<std::unique_ptr<weightsync::detail::StagingEngine>> {
    return std::unique_ptr<weightsync::detail::StagingEngine>(
        new HostStagingEngine(chunks, chunk_bytes, delay));
  };
  backend.make_copier = [delay,
                         control]() -> weightsync::Result<std::unique_ptr<weightsync::detail::AsyncCopier>> {
    return std::unique_ptr<weightsync::detail::AsyncCopier>(new HostAsyncCopier(delay, control));
  };
  backend.pin_host = [](void*,
                        std::size_t) -> weightsync::Result<std::unique_ptr<weightsync::detail::HostPin>> {
    return std::unique_ptr<weightsync::detail::HostPin>(new weightsync::detail::HostPin());
  };
  backend.allocate = [](std::size_t bytes)
      -> weightsync::Result<std::unique_ptr<weightsync::detail::DeviceAllocation>> {
    return std::unique_ptr<weightsync::detail::DeviceAllocation>(new HostDeviceAllocation(bytes));
  };
  backend.copy_within_device = [](void* dest, const void* source, std::size_t bytes) {
    std::memcpy(dest, source, bytes);
    return weightsync::Status();
  };
  return backend;
}

// Installs the host backend for a scope.
struct ScopedHostStaging {
  explicit ScopedHostStaging(std::chrono::microseconds delay = std::chrono::microseconds(0),
                             std::shared_ptr<CopierControl> control = std::make_shared<CopierControl>()) {
    weightsync::detail::set_device_backend_for_testing(host_staging_backend(delay, std::move(control)));
  }
  ~ScopedHostStaging() { weightsync::detail::set_device_backend_for_testing({}); }
  ScopedHostStaging(const ScopedHostStaging&) = delete;
  ScopedHostStaging& operator=(const ScopedHostStaging&) = delete;
};

}  // namespace wstest
