// SharedRegion over memfd_create + mmap(MAP_SHARED).
#include "memory/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace weightsync::detail {

Result<SharedRegion> SharedRegion::create(std::size_t bytes, bool lock, const char* name) try {
  if (bytes == 0) return Status(ErrorCode::kInvalidArgument, "shared region size must be > 0");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (bytes + page - 1) / page * page;
  SharedRegion region;
  region.fd_ = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (region.fd_ < 0) {
    return Status(ErrorCode::kInvalidConfig, std::string("memfd_create failed: ") + std::strerror(errno));
  }
  if (::ftruncate(region.fd_, static_cast<off_t>(mapped)) != 0) {
    return Status(ErrorCode::kInvalidConfig, "cannot size shared memory to " + std::to_string(mapped) +
                                                 " bytes: " + std::strerror(errno));
  }
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd_, 0);
  if (p == MAP_FAILED) {
    return Status(ErrorCode::kInvalidConfig, "cannot map " + std::to_string(mapped) +
                                                 " bytes of shared memory: " + std::strerror(errno));
  }
  region.data_ = p;
  region.size_ = bytes;
  region.mapped_ = mapped;
  // From now on only this mapping can write: no new writable mapping, no
  // write(2), no resizing, whoever holds a descriptor (even one reopened
  // read-write through /proc). Needs Linux >= 5.1.
  if (::fcntl(region.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) !=
      0) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("cannot seal shared memory (Linux >= 5.1 needed): ") + std::strerror(errno));
  }
  if (lock) {
    if (::mlock(p, mapped) != 0) {
      return Status(ErrorCode::kInvalidConfig,
                    "cannot lock " + std::to_string(mapped) + " bytes in RAM (" + std::strerror(errno) +
                        "); raise RLIMIT_MEMLOCK (ulimit -l) or set lock_memory = false");
    }
    region.locked_ = true;
  }
  return region;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SharedRegion::create: ") + e.what());
}

Result<int> SharedRegion::open_read_only() const {
  // Re-opening through /proc gives an O_RDONLY description of the same file:
  // whoever receives it can map the pages for reading only.
  const std::string path = "/proc/self/fd/" + std::to_string(fd_);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status(ErrorCode::kInternal,
                  "cannot reopen shared memory read-only: " + std::string(std::strerror(errno)));
  }
  return fd;
}

SlotAllocator memfd_slot_allocator(bool lock) {
  return SlotAllocator{"memfd",
                       [lock](std::size_t bytes, const char* label) -> Result<std::unique_ptr<SlotMemory>> {
                         auto region = SharedRegion::create(bytes, lock, label);
                         if (!region.ok()) return region.status();
                         return std::unique_ptr<SlotMemory>(new SharedRegion(std::move(*region)));
                       }};
}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(other.fd_), data_(other.data_), size_(other.size_), mapped_(other.mapped_), locked_(other.locked_) {
  other.fd_ = -1;
  other.data_ = nullptr;
  other.size_ = other.mapped_ = 0;
  other.locked_ = false;
}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.fd_;
    data_ = other.data_;
    size_ = other.size_;
    mapped_ = other.mapped_;
    locked_ = other.locked_;
    other.fd_ = -1;
    other.data_ = nullptr;
    other.size_ = other.mapped_ = 0;
    other.locked_ = false;
  }
  return *this;
}

SharedRegion::~SharedRegion() {
  reset();
}

void SharedRegion::reset() noexcept {
  if (data_ != nullptr) {
    if (locked_) ::munlock(data_, mapped_);
    ::munmap(data_, mapped_);
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  data_ = nullptr;
  size_ = mapped_ = 0;
  locked_ = false;
}

}  // namespace weightsync::detail
