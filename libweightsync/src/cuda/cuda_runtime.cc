// The CUDA runtime wrappers of cuda_runtime.h, over CUDA::cudart.
#include "cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <string>

namespace weightsync {
namespace detail {
namespace {

Status cuda_error(cudaError_t err, const std::string& what, ErrorCode code = ErrorCode::kInternal) {
  return Status(code, what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

CudaInfo probe() {
  CudaInfo info;
  info.built = true;
  cudaRuntimeGetVersion(&info.runtime_version);
  cudaDriverGetVersion(&info.driver_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for the next caller
    if (err == cudaErrorInsufficientDriver && info.driver_version == 0) {
      info.reason = "no CUDA driver is installed (libcuda.so not found): no GPU on this machine";
    } else if (err == cudaErrorNoDevice) {
      info.reason = "the CUDA driver sees no device (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    } else {
      info.reason = std::string("the CUDA runtime cannot start: ") + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ")";
    }
    return info;
  }
  info.device_count = count;
  if (count == 0) {
    info.reason = "the CUDA driver sees no device (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    return info;
  }
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) info.device_name = prop.name;
  info.usable = true;
  return info;
}

}  // namespace

Status cuda_ready() {
  const CudaInfo info = cuda_info();
  if (info.usable) return Status();
  return Status(ErrorCode::kInvalidConfig, "CUDA memory cannot be used here: " + info.reason);
}

namespace {

// The device of the allocation holding `p` on the current device; an error
// naming `what` if it is not device (or managed) memory of the current device.
Status check_one_address(const void* p, const char* what, const char* which) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cuda_error(err, std::string(what) + " (" + which + ") is not memory CUDA knows",
                      ErrorCode::kInvalidArgument);
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string(what) + " (" + which +
                      ") is not CUDA device memory; declare host memory kHost, and "
                      "give the region's exact size");
  }
  int device = 0;
  cudaGetDevice(&device);
  if (attr.type == cudaMemoryTypeDevice && attr.device != device) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string(what) + " is on CUDA device " + std::to_string(attr.device) +
                      ", but the current device is " + std::to_string(device) + "; call cudaSetDevice first");
  }
  return Status();
}

}  // namespace

Status check_device_pointer(const void* ptr, std::size_t bytes, const char* what) {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  if (ptr == nullptr || bytes == 0)
    return Status(ErrorCode::kInvalidArgument, std::string(what) + " is empty or null");
  // Both ends: a region that runs past its allocation usually ends outside
  // device memory (the runtime cannot give an allocation's size here).
  if (Status s = check_one_address(ptr, what, "its first byte"); !s.ok()) return s;
  return check_one_address(static_cast<const char*>(ptr) + (bytes - 1), what, "its last byte");
}

Status copy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  const cudaError_t err =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? Status()
                            : cuda_error(err, "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
}

Status copy_sync(void* dst, const void* src, std::size_t bytes) {
  const cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  return err == cudaSuccess ? Status() : cuda_error(err, "cudaMemcpy of " + std::to_string(bytes) + " bytes");
}

Status copy_device_to_device_sync(void* dst, const void* src, std::size_t bytes) {
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr);
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  return err == cudaSuccess ? Status()
                            : cuda_error(err, "device-to-device copy of " + std::to_string(bytes) + " bytes");
}

// ---- CudaStream ----

Result<CudaStream> CudaStream::create() {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  cudaStream_t s = nullptr;
  const cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) return cuda_error(err, "cudaStreamCreateWithFlags");
  CudaStream out;
  out.handle_ = s;
  return out;
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

CudaStream::~CudaStream() {
  if (handle_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

Status CudaStream::synchronize() const {
  const cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(handle_));
  return err == cudaSuccess ? Status() : cuda_error(err, "cudaStreamSynchronize");
}

// ---- CudaEvent ----

Result<CudaEvent> CudaEvent::create() {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  cudaEvent_t e = nullptr;
  const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (err != cudaSuccess) return cuda_error(err, "cudaEventCreateWithFlags");
  CudaEvent out;
  out.handle_ = e;
  return out;
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

Status CudaEvent::record(void* stream) {
  const cudaError_t err =
      cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? Status() : cuda_error(err, "cudaEventRecord");
}

Status CudaEvent::make_wait(void* stream) const {
  const cudaError_t err =
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(handle_), 0);
  return err == cudaSuccess ? Status() : cuda_error(err, "cudaStreamWaitEvent");
}

Status CudaEvent::synchronize() const {
  const cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(handle_));
  return err == cudaSuccess ? Status() : cuda_error(err, "cudaEventSynchronize");
}

// ---- DeviceMemory ----

Result<DeviceMemory> DeviceMemory::allocate(std::size_t bytes) {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cuda_error(err, "cannot allocate " + std::to_string(bytes) + " bytes of CUDA memory",
                      ErrorCode::kInvalidConfig);
  }
  DeviceMemory out;
  out.data_ = p;
  out.size_ = bytes;
  err = cudaMemset(p, 0, bytes);
  if (err != cudaSuccess) return cuda_error(err, "cudaMemset");
  return out;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (data_ != nullptr) cudaFree(data_);
}

// ---- PinnedHostMemory ----

Result<PinnedHostMemory> PinnedHostMemory::allocate(std::size_t bytes) {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cuda_error(err, "cannot allocate " + std::to_string(bytes) + " bytes of page-locked host memory",
                      ErrorCode::kInvalidConfig);
  }
  PinnedHostMemory out;
  out.data_ = p;
  out.size_ = bytes;
  return out;
}

PinnedHostMemory& PinnedHostMemory::operator=(PinnedHostMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
  }
  return *this;
}

PinnedHostMemory::~PinnedHostMemory() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

// ---- HostRegistration ----

Result<HostRegistration> HostRegistration::register_memory(void* data, std::size_t bytes) {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  const cudaError_t err = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cuda_error(err,
                      "cannot page-lock " + std::to_string(bytes) +
                          " bytes of slot memory for CUDA copies (raise RLIMIT_MEMLOCK: ulimit -l)",
                      ErrorCode::kInvalidConfig);
  }
  HostRegistration out;
  out.data_ = data;
  return out;
}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaHostUnregister(data_);
    data_ = other.data_;
    other.data_ = nullptr;
  }
  return *this;
}

HostRegistration::~HostRegistration() {
  if (data_ != nullptr) cudaHostUnregister(data_);
}

// ---- IPC ----

Result<CudaIpcHandle> export_ipc_handle(void* device_ptr) {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CudaIpcHandle), "cudaIpcMemHandle_t is 64 bytes");
  cudaIpcMemHandle_t handle{};
  const cudaError_t err = cudaIpcGetMemHandle(&handle, device_ptr);
  if (err != cudaSuccess) return cuda_error(err, "cudaIpcGetMemHandle", ErrorCode::kInvalidConfig);
  CudaIpcHandle out;
  std::memcpy(out.data(), &handle, out.size());
  return out;
}

Result<IpcMapping> IpcMapping::open(const CudaIpcHandle& handle) {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  cudaIpcMemHandle_t h{};
  std::memcpy(&h, handle.data(), handle.size());
  void* p = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cuda_error(err,
                      "cannot open the publisher's CUDA memory (cudaIpcOpenMemHandle; the publisher must be "
                      "another process on this host, with a GPU this process can reach)",
                      ErrorCode::kConnectionLost);
  }
  IpcMapping out;
  out.data_ = p;
  return out;
}

IpcMapping& IpcMapping::operator=(IpcMapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaIpcCloseMemHandle(data_);
    data_ = other.data_;
    other.data_ = nullptr;
  }
  return *this;
}

IpcMapping::~IpcMapping() {
  if (data_ != nullptr) cudaIpcCloseMemHandle(data_);
}

}  // namespace detail

CudaInfo cuda_info() {
  try {
    static std::once_flag once;
    static CudaInfo info;
    std::call_once(once, [] { info = detail::probe(); });
    return info;
  } catch (...) {
    CudaInfo failed;
    failed.built = true;
    failed.reason = "cannot query the CUDA runtime";
    return failed;
  }
}

}  // namespace weightsync
