// The CUDA device backend (device_backend.h): staging engine, async copier,
// host pinning; and the process-wide backend choice.
#include "cuda/device_backend.h"

#include <algorithm>
#include <mutex>

#include "cuda/cuda_runtime.h"

namespace weightsync::detail {
namespace {

// K pinned chunks; chunk i's copies run on the engine's stream and are
// tracked by event i.
class CudaStagingEngine final : public StagingEngine {
 public:
  static Result<std::unique_ptr<StagingEngine>> create(std::size_t chunks, std::size_t chunk_bytes) {
    std::unique_ptr<CudaStagingEngine> engine(new CudaStagingEngine());
    auto stream = CudaStream::create();
    if (!stream.ok()) return stream.status();
    engine->stream_ = std::move(*stream);
    for (std::size_t i = 0; i < chunks; ++i) {
      auto memory = PinnedHostMemory::allocate(chunk_bytes);
      if (!memory.ok()) return memory.status();
      auto event = CudaEvent::create();
      if (!event.ok()) return event.status();
      engine->chunks_.push_back(std::move(*memory));
      engine->events_.push_back(std::move(*event));
      engine->busy_.push_back(false);
    }
    engine->chunk_bytes_ = chunk_bytes;
    return std::unique_ptr<StagingEngine>(std::move(engine));
  }

  std::size_t chunk_count() const override { return chunks_.size(); }
  std::size_t chunk_bytes() const override { return chunk_bytes_; }
  char* chunk(std::size_t index) override { return static_cast<char*>(chunks_[index].data()); }

  Status copy_out(std::size_t index, const std::vector<ChunkCopy>& copies) override {
    for (const ChunkCopy& c : copies) {
      Status s = copy_async(c.dest, chunk(index) + c.chunk_offset, c.bytes, stream_.handle());
      if (!s.ok()) return s;
    }
    busy_[index] = true;
    return events_[index].record(stream_.handle());
  }

  Status wait(std::size_t index) override {
    if (!busy_[index]) return Status();
    busy_[index] = false;
    return events_[index].synchronize();
  }

 private:
  CudaStagingEngine() = default;
  CudaStream stream_;  // declared first: destroyed after the events and chunks
  std::vector<PinnedHostMemory> chunks_;
  std::vector<CudaEvent> events_;
  std::vector<bool> busy_;
  std::size_t chunk_bytes_ = 0;
};

// Copies on the copier's own non-blocking stream, after event `ready_`
// (recorded on the caller's stream); event `done_` marks their end.
class CudaAsyncCopier final : public AsyncCopier {
 public:
  static Result<std::unique_ptr<AsyncCopier>> create() {
    std::unique_ptr<CudaAsyncCopier> copier(new CudaAsyncCopier());
    auto stream = CudaStream::create();
    if (!stream.ok()) return stream.status();
    auto ready = CudaEvent::create();
    if (!ready.ok()) return ready.status();
    auto done = CudaEvent::create();
    if (!done.ok()) return done.status();
    copier->stream_ = std::move(*stream);
    copier->ready_ = std::move(*ready);
    copier->done_ = std::move(*done);
    return std::unique_ptr<AsyncCopier>(std::move(copier));
  }

  Status enqueue(void* caller_stream, const std::vector<DeviceCopy>& copies) override {
    Status s = ready_.record(caller_stream);
    if (s.ok()) s = ready_.make_wait(stream_.handle());
    for (const DeviceCopy& c : copies) {
      if (!s.ok()) break;
      s = copy_async(c.dest, c.source, c.bytes, stream_.handle());
    }
    if (s.ok()) s = done_.record(stream_.handle());
    if (!s.ok()) (void)stream_.synchronize();  // copies already queued end before the slot is reused
    return s;
  }

  Status wait() override { return done_.synchronize(); }
  Status order_after(void* stream) override { return done_.make_wait(stream); }

 private:
  CudaAsyncCopier() = default;
  CudaStream stream_;  // declared first: destroyed after the events
  CudaEvent ready_;
  CudaEvent done_;
};

class CudaHostPin final : public HostPin {
 public:
  explicit CudaHostPin(HostRegistration registration) : registration_(std::move(registration)) {}

 private:
  HostRegistration registration_;
};

class CudaAllocation final : public DeviceAllocation {
 public:
  explicit CudaAllocation(DeviceMemory memory) : memory_(std::move(memory)) {}
  void* data() override { return memory_.data(); }

 private:
  DeviceMemory memory_;
};

DeviceBackend cuda_backend() {
  DeviceBackend backend;
  backend.check_device_memory = check_device_pointer;
  backend.make_staging = CudaStagingEngine::create;
  backend.make_copier = CudaAsyncCopier::create;
  backend.pin_host = [](void* data, std::size_t bytes) -> Result<std::unique_ptr<HostPin>> {
    auto registration = HostRegistration::register_memory(data, bytes);
    if (!registration.ok()) return registration.status();
    return std::unique_ptr<HostPin>(new CudaHostPin(std::move(*registration)));
  };
  backend.allocate = [](std::size_t bytes) -> Result<std::unique_ptr<DeviceAllocation>> {
    auto memory = DeviceMemory::allocate(bytes);
    if (!memory.ok()) return memory.status();
    return std::unique_ptr<DeviceAllocation>(new CudaAllocation(std::move(*memory)));
  };
  backend.copy_within_device = copy_device_to_device_sync;
  return backend;
}

std::mutex g_backend_mu;
DeviceBackend g_backend_override;

}  // namespace

DeviceBackend device_backend() {
  std::lock_guard<std::mutex> lock(g_backend_mu);
  if (g_backend_override.check_device_memory) return g_backend_override;
  return cuda_backend();
}

void set_device_backend_for_testing(DeviceBackend backend) {
  std::lock_guard<std::mutex> lock(g_backend_mu);
  g_backend_override = std::move(backend);
}

}  // namespace weightsync::detail
