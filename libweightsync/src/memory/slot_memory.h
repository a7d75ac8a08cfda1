// SlotMemory: one block of memory that holds a slot (or the stamp page) for
// the publisher's lifetime, and SlotAllocator, which makes such blocks.
//
// Three providers exist: CUDA device memory (cuda/device_slot_memory.h),
// SharedRegion (memfd, sealed; a local subscriber can map
// it read-only through a descriptor: transport/shm) and UCX (ucp_mem_map with
// UCP_MEM_MAP_ALLOCATE: UCX's shared-memory transports can give peers
// one-sided access only to memory UCX allocated itself; transport/ucx).
//
// Contract: data() is page-aligned, zero-filled when allocated, valid and
// writable by the owner until the object is destroyed. Any thread may read
// the accessors. open_read_only() returns a new descriptor the caller owns,
// or kInvalidConfig when the memory cannot be shared that way.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "weightsync/memory.h"
#include "weightsync/status.h"

namespace weightsync::detail {

// The bytes of a cudaIpcMemHandle_t, opaque here so that memory/ needs no
// CUDA header. cuda/cuda_runtime.h declares the same alias (a redeclaration
// of the same type; cuda/device_slot_memory.cc, which sees both, fails to
// compile if they ever differ).
using CudaIpcHandle = std::array<std::uint8_t, 64>;

class SlotMemory {
 public:
  virtual ~SlotMemory() = default;
  virtual void* data() const noexcept = 0;
  virtual std::size_t size() const noexcept = 0;         // as requested
  virtual std::size_t mapped_size() const noexcept = 0;  // rounded up to whole pages
  virtual bool shareable_by_descriptor() const noexcept = 0;
  virtual Result<int> open_read_only() const = 0;
  // kHost unless the block is CUDA device memory (cuda/device_slot_memory.h).
  virtual MemoryKind memory_kind() const noexcept { return MemoryKind::kHost; }
  // The CUDA IPC handle of device memory; kInvalidConfig for host memory.
  virtual Result<CudaIpcHandle> cuda_ipc_handle() const {
    return Status(ErrorCode::kInvalidConfig, "host slot memory has no CUDA IPC handle");
  }
};

struct SlotAllocator {
  std::string name;  // "memfd" or "ucx": logged, and shown by the publisher
  // `label` names the block in /proc/<pid>/maps where the provider can.
  std::function<Result<std::unique_ptr<SlotMemory>>(std::size_t bytes, const char* label)> allocate;
};

// The default provider: sealed memfd SharedRegions, mlocked when `lock`.
SlotAllocator memfd_slot_allocator(bool lock);

}  // namespace weightsync::detail
