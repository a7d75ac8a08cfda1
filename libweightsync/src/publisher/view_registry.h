// ViewRegistry: the views each subscriber session registered (REGISTER_VIEW:
// the byte ranges a partial pull reads, in its order) and the xxHash3-64 of
// each view per committed version (docs/protocol.md, "Views").
//
// Bounds (a hostile authenticated peer): every range lies in the slot, a
// view covers at most slot_bytes bytes, a session has at most
// kMaxViewsPerSession views and kMaxEntriesPerSession entries in all (32
// bytes each) describing at most max_ranges_per_session(slot_bytes) ranges
// in all (an entry is `count` ranges, and hashing costs per range as well as
// per byte: one entry of 64 Mi one-byte ranges cost 0.5-1.4 s a version
// before this cap; issue 30, finding 11), and a view's checksum is computed
// at most once per committed version it is leased at (cached by slot stamp):
// a session can make the publisher hash at most kMaxViewsPerSession x
// slot_bytes bytes in at most max(64 Ki, slot_bytes / 64) ranges per version.
//
// Pre-hashing: with start_prehashing(), committed() (called by the
// publishing thread after each commit, never blocking it) has the
// registry's own thread (a CommitWatcher, ring/commit_watcher.h: the newest
// commit, the others skipped) hash the *hot* views (leased at the previous
// version or this one) for the new version at once, so the lease that asks
// for the checksum finds it ready instead of hashing while the subscriber
// waits. It stops hashing for a version as soon as a newer commit waits. A
// lease that arrives while its view is being pre-hashed waits for that hash
// rather than computing it twice. Views not hot are hashed on first lease,
// as before. An exception while pre-hashing is logged at warn (the view is
// then hashed on lease).
//
// Threads: any thread. Requests of one session come one at a time; a
// checksum is computed outside the registry's mutex, on the calling worker
// or the pre-hashing thread (which takes the watcher's mutex under the
// registry's, never the other way round). The destructor stops and joins
// that thread; the ring must outlive the registry.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/checksum.h"
#include "ring/commit_watcher.h"
#include "ring/slot_ring.h"
#include "wire/messages.h"

namespace weightsync::detail {

class ViewRegistry {
 public:
  static constexpr std::size_t kMaxViewsPerSession = 16;
  static constexpr std::uint64_t kMaxEntriesPerSession = 1u << 16;
  // Ranges a session's views may describe in all: a range per 64 bytes of
  // the slot (so their per-range cost is at most about that of hashing the
  // slot once more), and never fewer than 64 Ki.
  static constexpr std::uint64_t max_ranges_per_session(std::uint64_t slot_bytes) {
    return slot_bytes / 64 > (1u << 16) ? slot_bytes / 64 : (1u << 16);
  }

  // key: the integrity layer's version key (view checksums are then keyed
  // tags); null: xxHash3.
  explicit ViewRegistry(std::uint64_t slot_bytes, std::shared_ptr<const VersionKey> key = nullptr)
      : slot_bytes_(slot_bytes), key_(std::move(key)) {}
  ~ViewRegistry();
  ViewRegistry(const ViewRegistry&) = delete;
  ViewRegistry& operator=(const ViewRegistry&) = delete;

  // Starts the pre-hashing thread over `ring` (publishers with checksums),
  // once; null: nothing.
  void start_prehashing(const SlotRing* ring);
  // `slot` now holds a committed version stamped `stamp`. Nothing before
  // start_prehashing().
  void committed(std::uint32_t slot, std::uint64_t stamp);

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

  // How many view checksums were computed by a lease (first lease of a view
  // at a version, or a cold view) and how many ahead of it by pre-hashing.
  struct Counters {
    std::uint64_t hashed_on_lease = 0;
    std::uint64_t prehashed = 0;
  };
  Counters counters() const;

 private:
  // A view's ranges never change once published to the view: add() builds a
  // new list and swaps the pointer, so a hash running outside the mutex keeps
  // the list it started with alive and unchanged (issue 30, finding 1), and
  // its result is kept only if the view still has that list.
  using Entries = std::shared_ptr<const std::vector<ViewEntry>>;
  struct View {
    Entries entries = std::make_shared<const std::vector<ViewEntry>>();
    std::uint64_t bytes = 0;
    std::uint64_t ranges = 0;
    // The last checksum computed, for the slot stamped `stamp`.
    std::uint32_t slot = 0;
    std::uint64_t stamp = 0;
    std::uint64_t checksum = 0;
    std::uint64_t last_leased_version = 0;
    std::uint64_t hashing_stamp = 0;  // the stamp the pre-hashing thread is hashing it for
  };
  struct Session {
    std::unordered_map<std::uint32_t, std::shared_ptr<View>> views;
    std::uint32_t next_id = 1;
    std::uint64_t entries = 0;
    std::uint64_t ranges = 0;
  };

  // The view's bytes in `slot`, if it still holds `stamp` after they were read.
  Result<std::uint64_t> hash_view(const std::vector<ViewEntry>& entries, const SlotRing& ring,
                                  std::uint32_t slot, std::uint64_t stamp) const;
  // The pre-hashing thread's work for one commit.
  void prehash(const SlotRing& ring, std::uint32_t slot, std::uint64_t stamp);

  const std::uint64_t slot_bytes_;
  std::shared_ptr<const VersionKey> key_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, Session> sessions_;
  Counters counters_;
  std::condition_variable cv_;  // a pre-hash finished (View::hashing_stamp cleared)
  // Last: stopped (and its thread joined) before the views go.
  CommitWatcher prehasher_{"publisher: view pre-hashing"};
};

}  // namespace weightsync::detail
