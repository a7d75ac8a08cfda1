// The bench's own CUDA runtime calls: the GPU limits (pinned host <-> device
// and device <-> device cudaMemcpy bandwidth) and DeviceBuffer, the cudaMalloc
// memory the GPU rows publish from and pull into. This header names no CUDA
// type: cuda_limits.cc implements it over the CUDA runtime when the build has
// CUDA (WEIGHTSYNC_HAVE_CUDA), cuda_limits_unavailable.cc otherwise, where
// every entry point reports "built without CUDA".
//
// Contract: calling thread only; never throws. Device memory is on the
// current device (the first one unless cudaSetDevice said otherwise). A
// figure that cannot be measured has gbps = NaN and a note saying why; a
// DeviceBuffer that cannot be allocated or copied returns false with *error.
// GB = 10^9 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "records.h"

namespace wsbench {

// Whether this executable was built with the CUDA runtime.
bool cuda_runtime_built();

enum class CudaCopy {
  kDeviceToPinnedHost,  // cudaMalloc -> cudaHostAlloc: the limit of publish_from_device into host slots
  kPinnedHostToDevice,  // cudaHostAlloc -> cudaMalloc: the limit of the staging ring's H2D copies
  kDeviceToDevice,      // cudaMalloc -> cudaMalloc: the limit of a cuda_ipc pull
};

// cudaMemcpyAsync of `bytes` on a stream of its own, timed on the host clock
// from the call until cudaStreamSynchronize returns (as a pull or a publish
// is timed); two untimed copies first, then the median over `repetitions`.
// Both buffers are allocated for the measurement and freed before it returns.
BaselineFigure measure_cuda_copy(CudaCopy kind, std::uint64_t bytes, int repetitions);

// cudaMalloc memory, freed by the destructor. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = other.data_;
      size_ = other.size_;
      other.data_ = nullptr;
      other.size_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  // cudaMalloc of `bytes` on the current device, every byte set to `fill`
  // (cudaMemset, synchronized: the memory is resident when this returns).
  static bool allocate(std::uint64_t bytes, int fill, DeviceBuffer* out, std::string* error);

  void* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  // Synchronous copies of `n` bytes at `offset` from / to host memory
  // (cudaMemcpy); false with *error when out of range or CUDA fails.
  bool write(std::uint64_t offset, const void* source, std::size_t n, std::string* error);
  bool read(std::uint64_t offset, void* destination, std::size_t n, std::string* error) const;

 private:
  void reset() noexcept;  // cudaFree; defined beside the runtime calls
  void* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace wsbench
