// Reading a slot that is mapped into this process (transport/shm, and UCX's
// shared-memory transports through ucp_rkey_ptr): check the stamp, copy the
// plan's pieces in cache-sized chunks (reporting each through on_bytes), and
// return the stamp as observed after the last byte (the seqlock check).
// Any thread; no allocation; `stamp` and `slot_base` must stay mapped.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "common/tsan.h"
#include "transport/data_channel.h"

namespace weightsync::detail {

// Stamps are read in place from another process's memory: that needs
// lock-free (hence address-free) 64-bit atomics.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "mapped stamps need lock-free 64-bit atomics");

inline Result<std::uint64_t> copy_mapped_slot(const ReadRequest& request, const char* slot_base,
                                              std::uint64_t slot_bytes,
                                              const std::atomic<std::uint64_t>* stamp) {
  // Hashing: 4 MiB pieces, hashed while in cache. Else one memcpy per piece:
  // glibc copies large blocks with non-temporal stores, and very large ones
  // (>= 16x its threshold) across several pages at once; on the machine of
  // docs/performance.md a 1 GiB copy in 64 MiB pieces ran at 2/3 the speed.
  const std::uint64_t kCopyChunk = request.hashing ? (4u << 20) : UINT64_MAX;
  if (stamp->load(std::memory_order_acquire) != request.stamp) {
    return Status(ErrorCode::kVersionRevoked, "slot was rewritten before the read; pull again");
  }
  {
    SeqlockReadScope racy_reads;  // may race a revoking writer; the stamp below decides
    for (const ReadPiece& piece : *request.plan) {
      if (piece.slot_offset > slot_bytes || piece.length > slot_bytes - piece.slot_offset) {
        return Status(ErrorCode::kInternal, "read plan outside the slot");
      }
      auto* dest = static_cast<char*>(piece.dest);
      for (std::uint64_t done = 0; done < piece.length;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kCopyChunk, piece.length - done));
        std::memcpy(dest + done, slot_base + piece.slot_offset + done, n);
        if (request.on_bytes) request.on_bytes(dest + done, n);
        done += n;
      }
    }
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return stamp->load(std::memory_order_relaxed);
}

// The newest version committed in a mapped stamp page of `count` slots, read
// without a round trip (a reader's "is there anything newer?" check), or
// nullopt when the page kept changing or holds over 64 slots (then ask the
// publisher).
// One pass is not enough: a writer may commit slot A and open slot B between
// the loads of A and B, and a single pass then sees both odd, "nothing
// committed". A pass is trusted only when a second pass reads the same stamps:
// stamps only grow (or drop to 0 on abandon), so an unchanged page held those
// values together at the moment between the two passes.
inline std::optional<std::uint64_t> newest_committed_stamp(const std::atomic<std::uint64_t>* stamps,
                                                           std::size_t count) {
  constexpr std::size_t kMaxSlots = 64;
  constexpr int kAttempts = 4;
  if (count > kMaxSlots) return std::nullopt;
  std::uint64_t first[kMaxSlots];
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    for (std::size_t s = 0; s < count; ++s) first[s] = stamps[s].load(std::memory_order_acquire);
    std::uint64_t newest = 0;
    bool stable = true;
    for (std::size_t s = 0; s < count && stable; ++s) {
      const std::uint64_t stamp = stamps[s].load(std::memory_order_acquire);
      stable = stamp == first[s];
      if ((stamp & 1u) == 0) newest = std::max(newest, stamp >> 1);
    }
    if (stable) return newest;
  }
  return std::nullopt;
}

}  // namespace weightsync::detail
