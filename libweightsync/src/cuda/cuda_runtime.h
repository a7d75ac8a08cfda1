// The CUDA runtime, as the rest of the library sees it: RAII owners of
// device memory, page-locked host memory, streams, events and IPC mappings,
// and the few copy calls the library makes. Every call returns a Status
// naming the CUDA error; nothing throws.
//
// Two implementations: cuda_runtime.cc (WEIGHTSYNC_WITH_CUDA, links
// CUDA::cudart) and cuda_unavailable.cc, whose every call fails with
// kInvalidConfig "built without CUDA" (no #ifdef in the core code).
//
// Threads: the CUDA runtime is thread-safe; each owner object is used by one
// thread at a time. Streams are passed as void* (a cudaStream_t; nullptr is
// the legacy default stream). Copies use cudaMemcpyDefault: unified virtual
// addressing tells host from device memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "weightsync/cuda.h"
#include "weightsync/status.h"

namespace weightsync::detail {

// OK when a CUDA device can be used; else kInvalidConfig with the reason.
Status cuda_ready();

// OK when [ptr, ptr+bytes) starts in device memory (or managed memory) of
// the current device; kInvalidArgument naming `what` otherwise.
Status check_device_pointer(const void* ptr, std::size_t bytes, const char* what);

// Copies on `stream` (cudaMemcpyAsync, cudaMemcpyDefault).
Status copy_async(void* dst, const void* src, std::size_t bytes, void* stream);
// Blocking copy (cudaMemcpy, cudaMemcpyDefault).
Status copy_sync(void* dst, const void* src, std::size_t bytes);
// A device-to-device copy on the legacy default stream (ordered after the
// work queued on every blocking stream, PyTorch's default stream included),
// returned from only once the bytes are there: cudaMemcpy alone returns
// before a device-to-device copy ends.
Status copy_device_to_device_sync(void* dst, const void* src, std::size_t bytes);

class CudaStream {
 public:
  // A non-blocking stream on the current device (no implicit sync with stream 0).
  static Result<CudaStream> create();
  CudaStream() = default;
  CudaStream(CudaStream&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();
  void* handle() const noexcept { return handle_; }
  Status synchronize() const;

 private:
  void* handle_ = nullptr;
};

class CudaEvent {
 public:
  // Timing disabled (cheapest; for ordering and completion only).
  static Result<CudaEvent> create();
  CudaEvent() = default;
  CudaEvent(CudaEvent&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();
  Status record(void* stream);
  // Makes `stream` wait (on the device) for the work this event recorded.
  Status make_wait(void* stream) const;
  // Blocks the calling thread until the recorded work is complete.
  Status synchronize() const;

 private:
  void* handle_ = nullptr;
};

// cudaMalloc on the current device. Zero-filled.
class DeviceMemory {
 public:
  static Result<DeviceMemory> allocate(std::size_t bytes);
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
  }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();
  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// cudaHostAlloc: page-locked host memory the copy engines read and write at
// full speed.
class PinnedHostMemory {
 public:
  static Result<PinnedHostMemory> allocate(std::size_t bytes);
  PinnedHostMemory() = default;
  PinnedHostMemory(PinnedHostMemory&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
  }
  PinnedHostMemory& operator=(PinnedHostMemory&& other) noexcept;
  PinnedHostMemory(const PinnedHostMemory&) = delete;
  PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;
  ~PinnedHostMemory();
  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// cudaHostRegister of memory someone else allocated (the publisher's slots),
// undone when destroyed. The memory must outlive the registration.
class HostRegistration {
 public:
  static Result<HostRegistration> register_memory(void* data, std::size_t bytes);
  HostRegistration() = default;
  HostRegistration(HostRegistration&& other) noexcept : data_(other.data_) { other.data_ = nullptr; }
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration();

 private:
  void* data_ = nullptr;
};

// A cudaIpcMemHandle_t, as bytes (it is 64 bytes in every CUDA release).
using CudaIpcHandle = std::array<std::uint8_t, 64>;

// The handle another process opens to reach `device_ptr`'s allocation.
Result<CudaIpcHandle> export_ipc_handle(void* device_ptr);

// Another process's allocation, opened on the current device
// (cudaIpcOpenMemHandle; closed when destroyed). Fails inside the process
// that exported the handle (a CUDA rule).
class IpcMapping {
 public:
  static Result<IpcMapping> open(const CudaIpcHandle& handle);
  IpcMapping() = default;
  IpcMapping(IpcMapping&& other) noexcept : data_(other.data_) { other.data_ = nullptr; }
  IpcMapping& operator=(IpcMapping&& other) noexcept;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  ~IpcMapping();
  void* data() const noexcept { return data_; }

 private:
  void* data_ = nullptr;
};

}  // namespace weightsync::detail
