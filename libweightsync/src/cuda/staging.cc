// Staged reads (staging.h) and the CUDA staging engine.
#include "cuda/staging.h"

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

DeviceBackend cuda_backend() {
  return DeviceBackend{check_device_pointer, CudaStagingEngine::create};
}

std::mutex g_backend_mu;
DeviceBackend g_backend_override;

}  // namespace

DeviceBackend device_backend() {
  std::lock_guard<std::mutex> lock(g_backend_mu);
  if (g_backend_override.make_staging) return g_backend_override;
  return cuda_backend();
}

void set_device_backend_for_testing(DeviceBackend backend) {
  std::lock_guard<std::mutex> lock(g_backend_mu);
  g_backend_override = std::move(backend);
}

Result<std::uint64_t> staged_read(DataChannel& channel, const ReadRequest& base, StagingEngine& engine) {
  const std::size_t capacity = engine.chunk_bytes();
  const std::size_t chunks = engine.chunk_count();
  std::vector<ReadPiece> window;
  std::vector<ChunkCopy> copies;
  std::size_t window_index = 0;
  std::uint64_t stamp = base.stamp;
  Status failed;

  // Reads the gathered window into its chunk, then starts its device copies.
  auto flush = [&]() -> bool {
    if (window.empty()) return true;
    const std::size_t index = window_index % chunks;
    ReadRequest request = base;
    request.plan = &window;
    auto read = channel.read(request);
    if (!read.ok()) {
      failed = read.status();
      return false;
    }
    stamp = *read;
    if (stamp != base.stamp) return false;  // torn: stop reading; the caller discards the pull
    if (Status s = engine.copy_out(index, copies); !s.ok()) {
      failed = s;
      return false;
    }
    window.clear();
    copies.clear();
    ++window_index;
    // The next window reuses this slot of the ring: its previous copies must be done.
    if (Status s = engine.wait(window_index % chunks); !s.ok()) {
      failed = s;
      return false;
    }
    return true;
  };

  std::size_t filled = 0;
  bool going = true;
  for (const ReadPiece& piece : *base.plan) {
    std::uint64_t done = 0;
    while (going && done < piece.length) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(capacity - filled, piece.length - done));
      char* staging = engine.chunk(window_index % chunks) + filled;
      window.push_back(ReadPiece{piece.slot_offset + done, n, staging});
      copies.push_back(ChunkCopy{static_cast<char*>(piece.dest) + done, filled, n});
      filled += n;
      done += n;
      if (filled == capacity) {
        going = flush();
        filled = 0;
      }
    }
    if (!going) break;
  }
  if (going) going = flush();
  // Wait for every chunk (also after a failure: no copy may outlive the call).
  for (std::size_t i = 0; i < chunks; ++i) {
    Status s = engine.wait(i);
    if (failed.ok() && !s.ok()) failed = s;
  }
  if (!failed.ok()) return failed;
  return stamp;
}

}  // namespace weightsync::detail
