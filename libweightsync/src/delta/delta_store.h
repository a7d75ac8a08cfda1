// DeltaStore: the publisher's delta versions (docs/slow_links.md, "Delta
// versions"). After each commit its own thread (a CommitWatcher,
// ring/commit_watcher.h: the newest commit, the others skipped) copies the
// committed slot (seqlock read: a slot overwritten during the copy is
// dropped, a newer commit follows), encodes it against the previous version
// it copied, and keeps the newest `history` deltas. Each delta is computed
// once, never on the publishing thread; subscribers holding an older version
// get the chain of deltas from it to the newest.
//
// Contract
// - committed() is called by the publishing thread after every commit; it
//   only records the newest commit and wakes the thread (never blocks on it).
//   A commit superseded before the thread took it is never copied (counted
//   in stats().skipped); the chain then jumps it. An exception while a
//   version is absorbed is logged at warn and the thread goes on.
// - chain() may be called from any thread (the publisher's workers); it waits
//   at most `wait` for a delta reaching `at_least`. The publisher calls it
//   with no wait: readiness() says, without waiting, whether a chain can be
//   answered now, may come (the event loop parks the request, woken by the
//   listener), or never will (refused at once, no worker held).
// - At most send_cap() chains are being sent at once (try_begin_send /
//   end_send), so peers that do not read hold at most that many workers.
// - Refusals per session: a session refused kFreeRefusals times within a
//   second has its next FETCH_DELTA held (parked, no worker) until that
//   second ends (refusal_hold), so a closed loop of futile requests costs the
//   publisher a few requests per second per session, not a busy core. One
//   entry per session that was refused, dropped by release_session().
// - Memory: three slot-sized host buffers (previous, newest, scratch) plus
//   the kept deltas, at most `history` of them and, together, at most
//   history x the image (a delta larger than the image is not kept).
// - Host slots only (the thread reads slot bytes with the CPU).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/checksum.h"
#include "ring/commit_watcher.h"
#include "ring/slot_ring.h"
#include "weightsync/layout.h"
#include "weightsync/status.h"

namespace weightsync::detail {

struct DeltaLink {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint64_t checksum = 0;  // version `to`'s checksum or keyed tag (common/checksum.h)
  std::shared_ptr<const std::vector<std::uint8_t>> compressed;
};

struct DeltaStoreStats {
  std::uint64_t computed = 0;      // deltas encoded
  std::uint64_t dropped = 0;       // copies discarded: the slot was overwritten during the copy
  std::uint64_t skipped = 0;       // commits never copied: a newer one came before the thread took them
  std::uint64_t not_smaller = 0;   // deltas not kept: no smaller than the image
  std::uint64_t served = 0;        // chains handed out
  std::uint64_t last_bytes = 0;    // size of the newest delta
  double last_seconds = 0.0;       // copy + encode time of the newest delta
};

enum class DeltaReadiness {
  kNow,    // chain() answers now: a chain, or a final refusal
  kLater,  // the delta thread has not reached `at_least` and a chain from `have` may still come
  kNever,  // no chain from `have` can ever reach `at_least` here
};

class DeltaStore {
 public:
  // key: the integrity layer's version key (links then carry keyed tags).
  static Result<std::unique_ptr<DeltaStore>> create(const WeightLayout& layout, const SlotRing& ring,
                                                    std::size_t history, int level,
                                                    std::shared_ptr<const VersionKey> key = nullptr);
  ~DeltaStore();
  DeltaStore(const DeltaStore&) = delete;
  DeltaStore& operator=(const DeltaStore&) = delete;

  // Publishing thread: `slot` now holds `stamp` (version << 1), committed.
  void committed(std::uint32_t slot, std::uint64_t stamp);

  // The deltas from `have` to the newest kept version, once that reaches
  // `at_least` (waiting up to `wait`), their compressed bytes summing to at
  // most `max_bytes`. kNotReady (the subscriber pulls in full) when no chain
  // starts at `have`, it never reaches `at_least` in time, or it is too big.
  Result<std::vector<DeltaLink>> chain(std::uint64_t have, std::uint64_t at_least, std::uint64_t max_bytes,
                                       std::chrono::milliseconds wait);

  // See the contract above. Never waits.
  DeltaReadiness readiness(std::uint64_t have, std::uint64_t at_least) const;
  // Called (under the store's lock: keep it short, never call back) after
  // the delta thread finishes with a version. nullptr: none. The server sets
  // it to wake its event loop, and clears it before it goes away.
  void set_listener(std::function<void()> listener);
  static constexpr std::uint32_t kFreeRefusals = 2;
  // How long `session`'s next FETCH_DELTA is held (0: serve it now).
  std::chrono::milliseconds refusal_hold(std::uint64_t session);
  void note_refusal(std::uint64_t session);
  void release_session(std::uint64_t session);
  // Chains being sent: false when send_cap() are already under way.
  bool try_begin_send();
  void end_send();
  void set_send_cap(std::size_t cap);
  std::size_t history() const noexcept { return history_; }

  std::size_t element_bytes() const noexcept { return element_bytes_; }
  DeltaStoreStats stats() const;
  void stop();

 private:
  DeltaStore(const WeightLayout& layout, const SlotRing& ring, std::size_t history, int level,
             std::shared_ptr<const VersionKey> key);
  // Copies and encodes one committed version (the watcher's thread only).
  void absorb(std::uint32_t slot, std::uint64_t stamp);

  const WeightLayout& layout_;
  const SlotRing& ring_;
  const std::size_t history_;
  const int level_;
  const std::size_t element_bytes_;
  const std::size_t image_bytes_;
  const std::shared_ptr<const VersionKey> key_;

  // Thread-only state.
  std::vector<std::uint8_t> previous_, newest_, scratch_, encoded_;
  std::uint64_t previous_version_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;   // a link kept, or stop(): wakes chain()
  bool stopping_ = false;        // stop(): chain() and readiness() answer at once
  std::deque<DeltaLink> links_;  // oldest first; links_[i].to == links_[i + 1].from
  std::uint64_t absorbed_ = 0;   // newest version the thread finished with (kept, not smaller or first)
  std::function<void()> listener_;
  std::size_t sending_ = 0;
  struct RefusalWindow {
    std::chrono::steady_clock::time_point start{};
    std::uint32_t count = 0;
  };
  std::unordered_map<std::uint64_t, RefusalWindow> refusals_;
  std::size_t send_cap_ = 16;
  DeltaStoreStats stats_;
  // Last: stopped (and its thread joined) before the state absorb() uses goes.
  CommitWatcher watcher_{"publisher: delta"};
};

}  // namespace weightsync::detail
