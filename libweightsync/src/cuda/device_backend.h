// DeviceBackend: everything the library does with device memory beyond the
// cuda_ipc transport, behind one seam:
// - checking that a pointer is device memory of the current device;
// - StagingEngine: K page-locked host chunks and the asynchronous copies out
//   of them to the device (staged pulls, transport/staging_channel.h);
// - AsyncCopier: copies from device memory into slots, ordered after the
//   caller's stream, waited for by the publisher's commit thread
//   (publisher/device_publish.h);
// - page-locking the publisher's host slots for those copies;
// - device buffers the library owns, and copies between them.
//
// The default backend is CUDA (device_backend.cc). Tests, and only tests, may
// install one whose "device" is host memory and whose copy engine is a
// thread (tests/support/host_staging.h), so that the staged pulls and the
// device-publish pipeline run on machines without a GPU.
//
// Threads: device_backend() and set_device_backend_for_testing() from any
// thread. An engine is driven by one thread. An AsyncCopier's enqueue and
// order_after come from one thread; wait may run on another (the commit
// thread), after enqueue returned, concurrently with order_after. Copies may
// run elsewhere (a CUDA stream, a thread).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

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

struct DeviceCopy {
  void* dest = nullptr;
  const void* source = nullptr;
  std::size_t bytes = 0;
};

class AsyncCopier {
 public:
  virtual ~AsyncCopier() = default;
  // Starts `copies`, ordered after the work queued on `caller_stream` (a
  // cudaStream_t; nullptr: the legacy default stream). One batch at a time:
  // the caller waits for a batch before it enqueues the next.
  virtual Status enqueue(void* caller_stream, const std::vector<DeviceCopy>& copies) = 0;
  // Blocks until the last batch is complete; its status.
  virtual Status wait() = 0;
  // Makes `stream` wait, on the device, for the last batch.
  virtual Status order_after(void* stream) = 0;
};

// Device memory of the current device, owned while this object lives
// (zero-filled).
class DeviceAllocation {
 public:
  virtual ~DeviceAllocation() = default;
  virtual void* data() = 0;
};

// Memory made copyable at full speed (page-locked) while this object lives.
class HostPin {
 public:
  virtual ~HostPin() = default;
};

struct DeviceBackend {
  // OK when [ptr, ptr+bytes) is usable device memory; `what` names it in errors.
  std::function<Status(const void* ptr, std::size_t bytes, const char* what)> check_device_memory;
  std::function<Result<std::unique_ptr<StagingEngine>>(std::size_t chunks, std::size_t chunk_bytes)>
      make_staging;
  std::function<Result<std::unique_ptr<AsyncCopier>>()> make_copier;
  std::function<Result<std::unique_ptr<HostPin>>(void* data, std::size_t bytes)> pin_host;
  // Device buffers the library owns (StagedUpdates' staging areas), and a
  // device-to-device copy that returns once the bytes are there.
  std::function<Result<std::unique_ptr<DeviceAllocation>>(std::size_t bytes)> allocate;
  std::function<Status(void* dest, const void* source, std::size_t bytes)> copy_within_device;
};

// The backend for MemoryKind::kCuda memory (CUDA, unless a test replaced it).
DeviceBackend device_backend();
// Tests only: replaces the backend for the whole process; a default-made
// DeviceBackend restores CUDA.
void set_device_backend_for_testing(DeviceBackend backend);

}  // namespace weightsync::detail
