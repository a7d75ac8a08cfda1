// cuda_runtime.h for a build without CUDA: every call fails with
// kInvalidConfig and says how to build with it; the owners stay empty.
#include "cuda/cuda_runtime.h"

namespace weightsync {
namespace detail {
namespace {
constexpr const char* kNotBuilt =
    "this build of weightsync has no CUDA support (configure with -DWEIGHTSYNC_WITH_CUDA=ON and the CUDA "
    "Toolkit installed)";
Status not_built() {
  return Status(ErrorCode::kInvalidConfig, std::string("CUDA memory cannot be used here: ") + kNotBuilt);
}
}  // namespace

Status cuda_ready() {
  return not_built();
}
Status check_device_pointer(const void*, std::size_t, const char*) {
  return not_built();
}
Status copy_async(void*, const void*, std::size_t, void*) {
  return not_built();
}
Status copy_sync(void*, const void*, std::size_t) {
  return not_built();
}

Status copy_device_to_device_sync(void*, const void*, std::size_t) {
  return not_built();
}

Result<CudaStream> CudaStream::create() {
  return not_built();
}
CudaStream& CudaStream::operator=(CudaStream&&) noexcept {
  return *this;
}
CudaStream::~CudaStream() = default;
Status CudaStream::synchronize() const {
  return not_built();
}

Result<CudaEvent> CudaEvent::create() {
  return not_built();
}
CudaEvent& CudaEvent::operator=(CudaEvent&&) noexcept {
  return *this;
}
CudaEvent::~CudaEvent() = default;
Status CudaEvent::record(void*) {
  return not_built();
}
Status CudaEvent::make_wait(void*) const {
  return not_built();
}
Status CudaEvent::synchronize() const {
  return not_built();
}

Result<DeviceMemory> DeviceMemory::allocate(std::size_t) {
  return not_built();
}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&&) noexcept {
  return *this;
}
DeviceMemory::~DeviceMemory() = default;

Result<PinnedHostMemory> PinnedHostMemory::allocate(std::size_t) {
  return not_built();
}
PinnedHostMemory& PinnedHostMemory::operator=(PinnedHostMemory&&) noexcept {
  return *this;
}
PinnedHostMemory::~PinnedHostMemory() = default;

Result<HostRegistration> HostRegistration::register_memory(void*, std::size_t) {
  return not_built();
}
HostRegistration& HostRegistration::operator=(HostRegistration&&) noexcept {
  return *this;
}
HostRegistration::~HostRegistration() = default;

Result<CudaIpcHandle> export_ipc_handle(void*) {
  return not_built();
}
Result<IpcMapping> IpcMapping::open(const CudaIpcHandle&) {
  return not_built();
}
IpcMapping& IpcMapping::operator=(IpcMapping&&) noexcept {
  return *this;
}
IpcMapping::~IpcMapping() = default;

}  // namespace detail

CudaInfo cuda_info() {
  CudaInfo info;
  info.reason = detail::kNotBuilt;
  return info;
}

}  // namespace weightsync
