// HostBuffer: page-aligned, zero-filled anonymous memory, optionally mlocked.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "weightsync/memory.h"

namespace weightsync {
namespace {
constexpr std::size_t kHugePageBytes = 2u << 20;  // x86-64 and aarch64 (4 KiB base pages)
}  // namespace

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
  // Buffers of a huge page or more start on a huge-page boundary and ask for
  // transparent huge pages: copies into them (every pull) take far fewer TLB
  // misses. Where THP is off the advice is ignored.
  const std::size_t huge = kHugePageBytes;
  const bool want_huge = mapped >= huge;
  const std::size_t reserve = want_huge ? mapped + huge : mapped;
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return Status(ErrorCode::kInvalidConfig,
                  "cannot map " + std::to_string(bytes) + " bytes of host memory: " + std::strerror(errno));
  }
  void* p = raw;
  if (want_huge) {
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = (start + huge - 1) / huge * huge;
    if (aligned > start) ::munmap(raw, aligned - start);
    const std::uintptr_t end = start + reserve, used_end = aligned + mapped;
    if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
    p = reinterpret_cast<void*>(aligned);
    (void)::madvise(p, mapped, MADV_HUGEPAGE);
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
