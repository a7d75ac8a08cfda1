// StagingArea: the buffers a StagedUpdates pulls into, and how a staged
// buffer reaches the live weights (weightsync/staged_updates.h).
//
// Contract
// - create() allocates the buffers once: two in kSwap mode (the live one and
//   the staging one, either may be live), one in kCopy mode (the staging one;
//   the live weights are the engine's). Each is laid out like the layout
//   (whole updates) or holds the slices packed in order, range by range
//   (partial ones). Host buffers are page-aligned HostBuffers; device buffers
//   come from the device backend (cuda/device_backend.h).
// - It checks what it is given: the live destination (kCopy) against the
//   layout, with the rules of Subscriber::prepare(); the mode against the
//   options; kInvalidArgument or kInvalidConfig with the reason.
// - copy_to_live() copies the staging buffer into the live destination: one
//   copy for a contiguous one, one per tensor or range otherwise.
// - Threads: none. The buffers' bytes are written by a pull on the owner's
//   background thread and read by the engine; StagedUpdates orders the two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/device_backend.h"
#include "weightsync/layout.h"
#include "weightsync/memory.h"
#include "weightsync/staged_updates.h"
#include "weightsync/subscriber.h"

namespace weightsync::detail {

// Host or device memory the library owns.
class StagingBuffer {
 public:
  static Result<StagingBuffer> allocate(std::size_t bytes, MemoryKind kind, bool lock_host);
  void* data() const noexcept { return data_; }

 private:
  HostBuffer host_;
  std::unique_ptr<DeviceAllocation> device_;
  void* data_ = nullptr;
};

class StagingArea {
 public:
  static Result<StagingArea> create(const WeightLayout& layout, const StagedUpdatesOptions& options);

  std::size_t buffer_count() const noexcept { return buffers_.size(); }
  void* buffer(std::size_t index) const noexcept { return buffers_[index].data(); }
  std::size_t buffer_bytes() const noexcept { return buffer_bytes_; }
  bool partial() const noexcept { return !slices_.empty(); }
  // Where a pull into buffer `index` lands.
  Destination destination(std::size_t index) const;
  // Partial: where each slice starts in a buffer; whole: empty.
  const std::vector<std::uint64_t>& slice_offsets() const noexcept { return slice_offsets_; }
  // kCopy: buffer 0's bytes into the live weights.
  Status copy_to_live() const;

 private:
  struct LiveCopy {
    std::uint64_t from = 0;  // offset in the staging buffer
    void* to = nullptr;
    std::uint64_t bytes = 0;
  };
  Status plan_copies(const WeightLayout& layout, const Destination& live);

  MemoryKind kind_ = MemoryKind::kHost;
  std::uint64_t total_bytes_ = 0;             // the layout's, for whole buffers
  std::vector<TensorSlice> slices_;           // partial: the ranges staged (dest unset)
  std::vector<std::uint64_t> slice_offsets_;  // partial: each slice's packed offset
  std::size_t buffer_bytes_ = 0;
  std::vector<StagingBuffer> buffers_;
  std::vector<LiveCopy> copies_;  // kCopy
};

}  // namespace weightsync::detail
