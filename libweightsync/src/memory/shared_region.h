// SharedRegion: page-aligned memory backed by a memfd, mapped shared, so that
// a local subscriber can map the same pages read-only (transport/shm). Owns
// the mapping and the descriptor. Zero-filled, optionally mlocked. Move-only.
// The memfd is sealed (F_SEAL_FUTURE_WRITE, SHRINK, GROW, SEAL) right after
// it is mapped: only the owner's mapping can ever write it.
#pragma once

#include <cstddef>

#include "memory/slot_memory.h"
#include "weightsync/status.h"

namespace weightsync::detail {

class SharedRegion final : public SlotMemory {
 public:
  static Result<SharedRegion> create(std::size_t bytes, bool lock, const char* name);

  SharedRegion() = default;
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion() override;

  void* data() const noexcept override { return data_; }
  std::size_t size() const noexcept override { return size_; }
  std::size_t mapped_size() const noexcept override { return mapped_; }
  bool shareable_by_descriptor() const noexcept override { return true; }
  // A new read-only descriptor for the same memory (the caller owns it), for
  // handing to a subscriber: it can only be mapped PROT_READ.
  Result<int> open_read_only() const override;

 private:
  void reset() noexcept;
  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;
  bool locked_ = false;
};

}  // namespace weightsync::detail
