// HostBuffer: page-aligned, zero-filled anonymous memory, optionally mlocked.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "weightsync/memory.h"

namespace weightsync {

const char* to_string(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kCuda: return "cuda";
  }
  return "unknown";
}

Result<HostBuffer> HostBuffer::allocate(std::size_t bytes, bool lock) try {
  if (bytes == 0) return Status(ErrorCode::kInvalidArgument, "HostBuffer::allocate: size must be > 0");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page)
    return Status(ErrorCode::kInvalidArgument, "HostBuffer::allocate: size overflows");
  const std::size_t mapped = (bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status(ErrorCode::kInvalidConfig,
                  "cannot map " + std::to_string(bytes) + " bytes of host memory: " + std::strerror(errno));
  }
  HostBuffer buffer;
  buffer.data_ = p;
  buffer.size_ = bytes;
  buffer.mapped_ = mapped;
  if (lock) {
    if (::mlock(p, mapped) != 0) {
      int err = errno;
      return Status(ErrorCode::kInvalidConfig,
                    "cannot lock " + std::to_string(mapped) + " bytes in RAM (" + std::strerror(err) +
                        "); raise RLIMIT_MEMLOCK (ulimit -l) or set lock_memory = false");
    }
    buffer.locked_ = true;
  }
  return buffer;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("HostBuffer::allocate: ") + e.what());
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(other.data_), size_(other.size_), mapped_(other.mapped_), locked_(other.locked_) {
  other.data_ = nullptr;
  other.size_ = other.mapped_ = 0;
  other.locked_ = false;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    mapped_ = other.mapped_;
    locked_ = other.locked_;
    other.data_ = nullptr;
    other.size_ = other.mapped_ = 0;
    other.locked_ = false;
  }
  return *this;
}

HostBuffer::~HostBuffer() {
  reset();
}

void HostBuffer::reset() noexcept {
  if (data_ != nullptr) {
    if (locked_) ::munlock(data_, mapped_);
    ::munmap(data_, mapped_);
  }
  data_ = nullptr;
  size_ = mapped_ = 0;
  locked_ = false;
}

}  // namespace weightsync
