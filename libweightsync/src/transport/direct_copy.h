// Reading a slot that is mapped into this process (transport/shm, and UCX's
// shared-memory transports through ucp_rkey_ptr): check the stamp, copy the
// plan's pieces in cache-sized chunks (reporting each through on_bytes), and
// return the stamp as observed after the last byte (the seqlock check).
// Any thread; no allocation; `stamp` and `slot_base` must stay mapped.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>

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

}  // namespace weightsync::detail
