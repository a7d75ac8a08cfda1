// cuda_limits.h over the CUDA runtime (built when WEIGHTSYNC_HAVE_CUDA): the
// cudaMemcpy limits of the GPU rows and the DeviceBuffer they use. Every CUDA
// error becomes a note or *error naming the call and cudaGetErrorString.
#include <cuda_runtime_api.h>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "cuda_limits.h"
#include "stats.h"

namespace wsbench {
namespace {

std::string cuda_error(const char* call, cudaError_t rc) {
  return std::string(call) + " failed: " + cudaGetErrorString(rc);
}

// Frees what it holds on scope exit.
struct PinnedHost {
  void* p = nullptr;
  ~PinnedHost() {
    if (p != nullptr) cudaFreeHost(p);
  }
};
struct DeviceMemory {
  void* p = nullptr;
  ~DeviceMemory() {
    if (p != nullptr) cudaFree(p);
  }
};
struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() {
    if (s != nullptr) cudaStreamDestroy(s);
  }
};

const char* copy_name(CudaCopy kind) {
  switch (kind) {
    case CudaCopy::kDeviceToPinnedHost: return "cudaMemcpy device -> pinned host";
    case CudaCopy::kPinnedHostToDevice: return "cudaMemcpy pinned host -> device";
    case CudaCopy::kDeviceToDevice: return "cudaMemcpy device -> device";
  }
  return "cudaMemcpy";
}

// Allocates one side of a copy: pinned host memory or device memory, filled.
bool allocate_side(bool device, std::uint64_t bytes, int fill, PinnedHost* host, DeviceMemory* dev,
                   std::string* error) {
  cudaError_t rc;
  if (device) {
    rc = cudaMalloc(&dev->p, bytes);
    if (rc != cudaSuccess) {
      *error = cuda_error("cudaMalloc", rc);
      return false;
    }
    rc = cudaMemset(dev->p, fill, bytes);
    if (rc == cudaSuccess) rc = cudaDeviceSynchronize();
    if (rc != cudaSuccess) {
      *error = cuda_error("cudaMemset", rc);
      return false;
    }
    return true;
  }
  rc = cudaHostAlloc(&host->p, bytes, cudaHostAllocDefault);
  if (rc != cudaSuccess) {
    *error = cuda_error("cudaHostAlloc", rc);
    return false;
  }
  auto* b = static_cast<unsigned char*>(host->p);
  for (std::uint64_t i = 0; i < bytes; i += 4096) b[i] = static_cast<unsigned char>(fill);  // fault in
  return true;
}

BaselineFigure failed(const std::string& note) {
  BaselineFigure f;
  f.note = note;
  return f;
}

}  // namespace

bool cuda_runtime_built() {
  return true;
}

BaselineFigure measure_cuda_copy(CudaCopy kind, std::uint64_t bytes, int repetitions) try {
  const std::string what = copy_name(kind);
  if (bytes == 0 || repetitions < 1) return failed(what + ": nothing to measure");
  const bool src_device = kind != CudaCopy::kPinnedHostToDevice;
  const bool dst_device = kind != CudaCopy::kDeviceToPinnedHost;
  PinnedHost src_host, dst_host;
  DeviceMemory src_dev, dst_dev;
  std::string error;
  if (!allocate_side(src_device, bytes, 0x5a, &src_host, &src_dev, &error) ||
      !allocate_side(dst_device, bytes, 0, &dst_host, &dst_dev, &error)) {
    return failed(what + ": " + error);
  }
  void* src = src_device ? src_dev.p : src_host.p;
  void* dst = dst_device ? dst_dev.p : dst_host.p;
  Stream stream;
  cudaError_t rc = cudaStreamCreateWithFlags(&stream.s, cudaStreamNonBlocking);
  if (rc != cudaSuccess) return failed(what + ": " + cuda_error("cudaStreamCreate", rc));
  std::vector<double> seconds;
  for (int i = 0; i < repetitions + 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream.s);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream.s);
    const auto end = std::chrono::steady_clock::now();
    if (rc != cudaSuccess) return failed(what + ": " + cuda_error("cudaMemcpyAsync", rc));
    if (i >= 2) seconds.push_back(std::chrono::duration<double>(end - start).count());
  }
  BaselineFigure figure;
  figure.gbps = static_cast<double>(bytes) / 1e9 / median(seconds);
  figure.repetitions = repetitions;
  return figure;
} catch (const std::exception& e) {
  return failed(std::string("CUDA copy limit failed: ") + e.what());
} catch (...) {
  return failed("CUDA copy limit failed");
}

bool DeviceBuffer::allocate(std::uint64_t bytes, int fill, DeviceBuffer* out, std::string* error) {
  out->reset();
  void* p = nullptr;
  cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc != cudaSuccess) {
    *error = cuda_error("cudaMalloc", rc) + " (" + std::to_string(bytes) + " bytes)";
    return false;
  }
  out->data_ = p;
  out->size_ = bytes;
  rc = cudaMemset(p, fill, bytes);
  if (rc == cudaSuccess) rc = cudaDeviceSynchronize();
  if (rc != cudaSuccess) {
    *error = cuda_error("cudaMemset", rc);
    out->reset();
    return false;
  }
  return true;
}

bool DeviceBuffer::write(std::uint64_t offset, const void* source, std::size_t n, std::string* error) {
  if (data_ == nullptr || offset > size_ || n > size_ - offset) {
    *error = "device write out of range";
    return false;
  }
  const cudaError_t rc =
      cudaMemcpy(static_cast<unsigned char*>(data_) + offset, source, n, cudaMemcpyHostToDevice);
  if (rc != cudaSuccess) {
    *error = cuda_error("cudaMemcpy host -> device", rc);
    return false;
  }
  return true;
}

bool DeviceBuffer::read(std::uint64_t offset, void* destination, std::size_t n, std::string* error) const {
  if (data_ == nullptr || offset > size_ || n > size_ - offset) {
    *error = "device read out of range";
    return false;
  }
  const cudaError_t rc =
      cudaMemcpy(destination, static_cast<const unsigned char*>(data_) + offset, n, cudaMemcpyDeviceToHost);
  if (rc != cudaSuccess) {
    *error = cuda_error("cudaMemcpy device -> host", rc);
    return false;
  }
  return true;
}

void DeviceBuffer::reset() noexcept {
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace wsbench
