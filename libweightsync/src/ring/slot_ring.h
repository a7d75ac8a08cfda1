// SlotRing: the publisher's versioned ring of slots, their seqlock stamps and
// the readers' leases (docs/consistency.md).
//
// Stamps: slot s's stamp is (version << 1) when it holds committed `version`,
// (version << 1) | 1 while `version` is being written, 0 when empty. Stamps
// live in their own page-aligned array so one-sided transports can expose it.
// The stamp page is host memory readers map (stamp_allocator, or the slots'
// allocator when null): with CUDA slots it is a memfd page.
// Slots and the stamp page come from a SlotAllocator: memfd-backed
// SharedRegions by default, so a subscriber on the same host can map them
// read-only (transport/shm), or UCX-allocated memory (transport/ucx).
//
// Leases: a lease pins the slot it reads until it is released, its session
// ends, or reserve() takes the slot back (the lease is then revoked and its
// reader gets kVersionRevoked). reserve() takes back a leased slot only when no
// candidate slot is free: under kRevokeOldest always (the oldest candidate),
// under kSkip only a candidate whose every live lease is at least
// `lease_timeout` old (steady clock) or superseded; otherwise kBusy. A lease
// is superseded when its session holds a live lease on a newer version: a
// session protects one version at a time (its newest), so one session that
// leases every version and releases nothing holds at most one slot against
// the writer, not the whole ring (issue 30, finding 13: such a hoarder let
// 3 versions through in 55 s against about 500). Its older leases stay
// usable until the writer needs their slot. A revoked lease that was at
// least `lease_timeout` old counts as expired as well as revoked.
//
// Streaming (docs/relays.md, "The pipelined chain"): a writer that writes
// its slot once, in order, may expose the version it is writing with
// begin_streaming(): that in-progress version (odd stamp) can then be leased
// by acquire(accept_streaming = true) when it is newer than every committed
// one, and advance_watermark() says how many leading bytes are final.
// abandon() revokes the leases of an in-progress version; commit() turns
// them into leases of the committed version (same slot, stamp version << 1).
// Plain acquire() never sees an in-progress version. Every change (commit,
// abandon, begin_streaming, watermark) bumps change_epoch() and wakes
// wait_change().
//
// Threads: reserve/commit/abandon/begin_streaming/advance_watermark come from the publishing thread only; all
// other methods from any thread. Metadata is guarded by one mutex; slot bytes
// are written outside it. Never throws, except std::bad_alloc from the lease
// tables.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/deadline.h"
#include "memory/slot_memory.h"
#include "weightsync/memory.h"
#include "weightsync/options.h"

namespace weightsync::detail {

struct LeaseGrant {
  std::uint64_t lease_id = 0;
  std::uint64_t version = 0;
  std::uint32_t slot = 0;
  std::uint64_t stamp = 0;
  bool has_checksum = false;
  std::uint64_t checksum = 0;
};

// Counters since create(); a snapshot taken under the ring's mutex.
struct RingStats {
  std::uint64_t published = 0;  // versions committed
  std::uint64_t skipped = 0;    // reserve() calls answered kBusy (kSkip)
  std::uint64_t revoked = 0;    // leases taken back, expired ones included
  std::uint64_t expired = 0;    // of those, leases at least lease_timeout old
  std::uint64_t granted = 0;    // leases granted
  std::uint64_t active = 0;     // live (granted, not revoked, not released)
  // The slowest reader of the newest version any reader released: the
  // longest grant-to-release time among its released leases (metrics).
  std::uint64_t slowest_release_version = 0;
  double slowest_release_seconds = 0.0;
};

// The state of a (streaming) lease for WAIT_WATERMARK and bounded READs.
struct StreamState {
  std::uint64_t watermark = 0;  // readable leading bytes; slot_bytes once committed
  bool committed = false;       // the slot holds the leased version, committed
  bool has_checksum = false;
  std::uint64_t checksum = 0;
};

struct Reservation {
  std::uint32_t slot = 0;
  std::uint32_t revoked = 0;  // leases taken back to free the slot
  void* data = nullptr;
};

class SlotRing {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMaxLeasesPerSession = 8;

  // kInvalidArgument unless 2 <= slots <= 1024 and lease_timeout >= 1 ms.
  static Result<std::unique_ptr<SlotRing>> create(std::size_t slots, std::size_t slot_bytes,
                                                  FullRingPolicy policy,
                                                  std::chrono::milliseconds lease_timeout,
                                                  const SlotAllocator& allocator,
                                                  const SlotAllocator* stamp_allocator = nullptr);

  std::size_t slot_count() const noexcept { return slots_.size(); }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  MemoryKind slot_memory_kind() const noexcept { return slots_.front().buffer->memory_kind(); }
  void* slot_data(std::uint32_t slot) noexcept { return slots_[slot].buffer->data(); }
  const void* slot_data(std::uint32_t slot) const noexcept { return slots_[slot].buffer->data(); }
  const SlotMemory& slot_region(std::uint32_t slot) const noexcept { return *slots_[slot].buffer; }
  // The stamps: slot_count() std::atomic<std::uint64_t>, one per slot, in order.
  const SlotMemory& stamp_region() const noexcept { return *stamp_page_; }
  // Which SlotAllocator made the memory ("memfd", "ucx").
  const std::string& allocator_name() const noexcept { return allocator_name_; }

  // --- publishing thread ---
  // Picks a slot for `version` (which must exceed the latest committed one)
  // and marks it being written. kBusy under kSkip while every candidate slot
  // holds a lease younger than lease_timeout.
  Result<Reservation> reserve(std::uint64_t version);
  void commit(std::uint32_t slot, std::uint64_t version, std::optional<std::uint64_t> checksum);
  void abandon(std::uint32_t slot);
  // Exposes the reserved slot's version to streaming readers, as `version`
  // (> the latest committed; the writer learned it only now, so it may differ
  // from the reserved one). kInvalidArgument otherwise.
  Status begin_streaming(std::uint32_t slot, std::uint64_t version);
  // The first `bytes` bytes of the slot are written for good (monotonic,
  // capped at slot_bytes). A no-op unless the slot is streaming.
  void advance_watermark(std::uint32_t slot, std::uint64_t bytes);

  // --- any thread ---
  std::uint64_t latest_version() const noexcept;
  // Leases the newest version if it is newer than `newer_than`; kNotReady if not.
  // With accept_streaming, an in-progress (streaming) version newer than the
  // newest committed one is leased instead (odd stamp, no checksum).
  Result<LeaseGrant> acquire(std::uint64_t session, std::uint64_t newer_than, bool accept_streaming = false);
  // Leases exactly `version` (committed; docs/consistency.md, "Across
  // ranks"): kNotReady if it is newer than the latest committed version,
  // kVersionRevoked if no slot holds it any more (a newer version took its
  // slot) or it was never published.
  Result<LeaseGrant> acquire_version(std::uint64_t session, std::uint64_t version);
  // Newest committed version, or with streaming the newest streamable
  // in-progress one if newer.
  std::uint64_t latest_streamable() const;
  // A lease's stream state: kVersionRevoked if revoked (an abandoned
  // in-progress version included) or its slot no longer holds its version;
  // kInvalidArgument if unknown.
  Result<StreamState> stream_state(std::uint64_t session, std::uint64_t lease_id) const;
  // Blocks until change_epoch() differs from `seen`, the deadline passes or
  // stop(); returns the epoch.
  std::uint64_t wait_change(std::uint64_t seen, Deadline deadline);
  std::uint64_t change_epoch() const;
  // Called on every change of change_epoch(), under the ring's lock: it must
  // only signal (a server writes its eventfd). Set while serving; cleared
  // (nullptr) before whatever it calls goes away. One listener at a time.
  void set_change_listener(std::function<void()> listener);
  // The lease, if it belongs to `session` and was not revoked. kVersionRevoked
  // if it was taken back; kInvalidArgument if unknown.
  Result<LeaseGrant> check_lease(std::uint64_t session, std::uint64_t lease_id) const;
  void release(std::uint64_t session, std::uint64_t lease_id);
  void release_session(std::uint64_t session);
  // Blocks until a version newer than `newer_than` is committed, the deadline
  // passes or stop() is called; returns the latest version either way.
  std::uint64_t wait_newer(std::uint64_t newer_than, Deadline deadline);
  void stop();
  bool stopped() const;
  // A relay whose forwarding stopped for good: from now on the publisher
  // refuses QUERY_VERSION and ACQUIRE with kConnectionLost and `why`
  // (publisher/control_handler.h), so leaves go elsewhere instead of taking
  // the held version as current. Wakes waiters (the change epoch moves).
  void retire(std::string why);
  // The reason retire() was given; nullopt while serving normally.
  std::optional<std::string> retired() const;

  // Seqlock read side: load with acquire before reading slot bytes;
  // stamp_after() fences and reloads after the bytes are read.
  std::uint64_t stamp_before(std::uint32_t slot) const noexcept;
  std::uint64_t stamp_after(std::uint32_t slot) const noexcept;

  RingStats stats() const;

 private:
  struct Slot {
    std::unique_ptr<SlotMemory> buffer;
    std::uint64_t version = 0;  // committed version held; 0 when empty
    bool writing = false;
    std::unordered_set<std::uint64_t> live;  // ids of its live (not revoked) leases
    bool has_checksum = false;
    std::uint64_t checksum = 0;
    std::uint64_t pending = 0;     // the version being written (while writing)
    bool streaming = false;        // writing, exposed to streaming readers
    std::uint64_t watermark = 0;   // while streaming
  };
  struct Lease {
    std::uint64_t session = 0;
    std::uint32_t slot = 0;
    std::uint64_t stamp = 0;
    std::uint64_t version = 0;
    Clock::time_point granted;
    bool revoked = false;
  };

  SlotRing() = default;
  std::atomic<std::uint64_t>& stamp(std::uint32_t slot) const noexcept { return stamps_[slot]; }
  void drop_lease_locked(std::unordered_map<std::uint64_t, Lease>::iterator it);
  // Records a lease of slot `chosen` (kInvalidArgument past kMaxLeasesPerSession).
  Result<LeaseGrant> grant_locked(std::uint64_t session, std::uint64_t id, int chosen, bool streamed);
  // True when `lease`'s session holds a live lease on a newer version.
  bool superseded_locked(const Lease& lease) const;
  // True when no live lease on `slot` protects it under kSkip: each is at
  // least lease_timeout_ old at `now`, or superseded.
  bool leases_expired_locked(const Slot& slot, Clock::time_point now) const;
  // Marks every live lease on `slot` revoked; returns how many, and adds the
  // expired ones (at `now`) to *expired.
  std::uint32_t revoke_slot_locked(Slot& slot, Clock::time_point now, std::uint32_t* expired);

  std::vector<Slot> slots_;
  std::size_t slot_bytes_ = 0;
  FullRingPolicy policy_ = FullRingPolicy::kRevokeOldest;
  Clock::duration lease_timeout_{};
  std::unique_ptr<SlotMemory> stamp_page_;
  std::string allocator_name_;
  std::atomic<std::uint64_t>* stamps_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable committed_cv_;
  bool stopping_ = false;
  std::optional<std::string> retired_;  // guarded by mu_
  int newest_ = -1;
  std::uint64_t epoch_ = 0;                // bumped on every change streaming readers wait for
  std::function<void()> change_listener_;  // guarded by mu_
  void changed_locked() {
    ++epoch_;
    if (change_listener_) change_listener_();
  }
  std::atomic<std::uint64_t> latest_version_{0};     // written under mu_, read lock-free
  std::unordered_map<std::uint64_t, Lease> leases_;  // live and revoked, until released
  // Each session's lease ids (live and revoked; at most kMaxLeasesPerSession).
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> sessions_;
  RingStats counters_;  // `active` kept equal to the number of live leases
};

}  // namespace weightsync::detail
