// cuda_limits.h in a build without CUDA (WEIGHTSYNC_HAVE_CUDA off): every
// entry point says so; nothing is measured or allocated.
#include <string>

#include "cuda_limits.h"

namespace wsbench {
namespace {

constexpr const char* kBuiltWithout =
    "weightsync-bench was built without CUDA (configure with WEIGHTSYNC_WITH_CUDA=ON and the CUDA Toolkit)";

}  // namespace

bool cuda_runtime_built() {
  return false;
}

BaselineFigure measure_cuda_copy(CudaCopy, std::uint64_t, int) {
  BaselineFigure f;
  f.note = kBuiltWithout;
  return f;
}

bool DeviceBuffer::allocate(std::uint64_t, int, DeviceBuffer* out, std::string* error) {
  out->reset();
  *error = kBuiltWithout;
  return false;
}

bool DeviceBuffer::write(std::uint64_t, const void*, std::size_t, std::string* error) {
  *error = kBuiltWithout;
  return false;
}

bool DeviceBuffer::read(std::uint64_t, void*, std::size_t, std::string* error) const {
  *error = kBuiltWithout;
  return false;
}

void DeviceBuffer::reset() noexcept {
  data_ = nullptr;
  size_ = 0;
}

}  // namespace wsbench
