// weightsync/memory.h: memory kinds and page-aligned host buffers.
//
// Contract
// - MemoryKind travels with every slot, source and destination. kCuda is
//   device memory of the current CUDA device; a build without CUDA, or a
//   machine without a device, refuses it with kInvalidConfig and the reason
//   (weightsync/cuda.h).
// - HostBuffer owns page-aligned anonymous memory (mmap), zero-filled,
//   optionally locked in RAM (mlock). Buffers of 2 MiB or more start on a
//   2 MiB boundary and are advised to use transparent huge pages (fewer TLB
//   misses on every pull into them). It is move-only; the memory is unmapped
//   when it is destroyed. Locking failure is an error, never silent.
// - Thread safety: a HostBuffer is a plain owner; concurrent reads and writes
//   of its bytes are the caller's business.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weightsync/status.h"

namespace weightsync {

enum class MemoryKind : std::uint8_t {
  kHost = 0,
  kCuda = 1,
};

const char* to_string(MemoryKind kind) noexcept;

class HostBuffer {
 public:
  // bytes > 0. lock: mlock the pages (needs RLIMIT_MEMLOCK headroom).
  static Result<HostBuffer> allocate(std::size_t bytes, bool lock = false);

  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() noexcept { return data_; }
  const void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool locked() const noexcept { return locked_; }

 private:
  void reset() noexcept;

  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;
  bool locked_ = false;
};

}  // namespace weightsync
