// ViewRegistry: the views each subscriber session registered (REGISTER_VIEW:
// the byte ranges a partial pull reads, in its order) and the xxHash3-64 of
// each view per committed version (docs/protocol.md, "Views").
//
// Bounds (a hostile authenticated peer): every range lies in the slot, a
// view covers at most slot_bytes bytes, a session has at most
// kMaxViewsPerSession views and kMaxEntriesPerSession entries in all (32
// bytes each), and a view's checksum is computed at most once per committed
// version it is leased at (cached by slot stamp): a session can make the
// publisher hash at most kMaxViewsPerSession x slot_bytes per version.
//
// Threads: any thread. Requests of one session come one at a time; a
// checksum is computed outside the registry's mutex, on the calling worker.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ring/slot_ring.h"
#include "wire/messages.h"

namespace weightsync::detail {

class ViewRegistry {
 public:
  static constexpr std::size_t kMaxViewsPerSession = 16;
  static constexpr std::uint64_t kMaxEntriesPerSession = 1u << 16;

  explicit ViewRegistry(std::uint64_t slot_bytes) : slot_bytes_(slot_bytes) {}

  // Creates a view (view_id 0) or appends to one of this session's. The reply
  // to send, or kInvalidArgument (a range outside the slot, a view over
  // slot_bytes, an unknown view, a cap reached) to refuse.
  Result<ViewMsg> add(std::uint64_t session, const RegisterViewMsg& request);
  // The checksum of `view_id`'s bytes in `slot`, which must hold `stamp`
  // (the caller holds a lease on it): cached, or computed now. kVersionRevoked
  // if the slot was rewritten meanwhile; kInvalidArgument for an unknown view.
  Result<std::uint64_t> checksum(std::uint64_t session, std::uint32_t view_id, const SlotRing& ring,
                                 std::uint32_t slot, std::uint64_t stamp);
  void release_session(std::uint64_t session);

 private:
  struct View {
    std::vector<ViewEntry> entries;
    std::uint64_t bytes = 0;
    // The last checksum computed, for the slot stamped `stamp`.
    std::uint32_t slot = 0;
    std::uint64_t stamp = 0;
    std::uint64_t checksum = 0;
  };
  struct Session {
    std::unordered_map<std::uint32_t, std::shared_ptr<View>> views;
    std::uint32_t next_id = 1;
    std::uint64_t entries = 0;
  };

  const std::uint64_t slot_bytes_;
  std::mutex mu_;
  std::unordered_map<std::uint64_t, Session> sessions_;
};

}  // namespace weightsync::detail
