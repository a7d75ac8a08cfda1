// Staged pulls into device memory: for transports that cannot write device
// memory, the read is split into windows of one staging chunk each; the
// transport reads window w into host chunk w % K while the copy engine moves
// the previous windows' chunks to the device (double buffering, never a
// whole-model staging copy). All windows are read under one lease; each
// window's stamp is checked, so a torn version is detected at the first
// window that sees the slot rewritten.
//
// StagingEngine: K page-locked host chunks and the asynchronous copies out of
// them. DeviceBackend: how destinations of MemoryKind::kCuda are checked and
// which StagingEngine serves them. The default backend is CUDA; tests (and
// only tests) may install one whose "device" is host memory and whose copy
// engine is a thread, to exercise the windowing on machines without a GPU.
//
// Threads: an engine is used by one thread (the pulling one); its copies may
// run elsewhere (a CUDA stream, a thread). Errors are Statuses.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "transport/data_channel.h"
#include "weightsync/status.h"

namespace weightsync::detail {

// Bytes [chunk_offset, chunk_offset + bytes) of a chunk go to `dest`.
struct ChunkCopy {
  void* dest = nullptr;
  std::size_t chunk_offset = 0;
  std::size_t bytes = 0;
};

class StagingEngine {
 public:
  virtual ~StagingEngine() = default;
  virtual std::size_t chunk_count() const = 0;
  virtual std::size_t chunk_bytes() const = 0;
  virtual char* chunk(std::size_t index) = 0;
  // Starts the copies out of chunk `index`; the chunk is busy until wait().
  virtual Status copy_out(std::size_t index, const std::vector<ChunkCopy>& copies) = 0;
  // Blocks until chunk `index`'s copies are complete (at once if it is idle).
  virtual Status wait(std::size_t index) = 0;
};

struct DeviceBackend {
  // OK when [ptr, ptr+bytes) is usable device memory; `what` names it in errors.
  std::function<Status(const void* ptr, std::size_t bytes, const char* what)> check_destination;
  std::function<Result<std::unique_ptr<StagingEngine>>(std::size_t chunks, std::size_t chunk_bytes)>
      make_staging;
};

// The backend for MemoryKind::kCuda destinations (CUDA, unless a test
// replaced it).
DeviceBackend device_backend();
// Tests only: replaces the backend for the whole process; an empty backend
// restores CUDA.
void set_device_backend_for_testing(DeviceBackend backend);

// Reads `base.plan` (device destinations) window by window through `engine`
// and waits for every copy. Returns the stamp of the last window, or the
// first stamp that differs from base.stamp (the caller reports it as torn),
// or the channel's or the engine's error.
Result<std::uint64_t> staged_read(DataChannel& channel, const ReadRequest& base, StagingEngine& engine);

}  // namespace weightsync::detail
