// SlotRing: slot choice, seqlock stamps and leases.
#include "ring/slot_ring.h"

#include <algorithm>
#include <new>
#include <string>

#include "common/log.h"
#include "common/random.h"

namespace weightsync::detail {

Result<std::unique_ptr<SlotRing>> SlotRing::create(std::size_t slots, std::size_t slot_bytes,
                                                   FullRingPolicy policy,
                                                   std::chrono::milliseconds lease_timeout,
                                                   const SlotAllocator& allocator,
                                                   const SlotAllocator* stamp_allocator) {
  if (slots < 2 || slots > 1024) {
    return Status(ErrorCode::kInvalidArgument,
                  "a publisher needs between 2 and 1024 slots, not " + std::to_string(slots));
  }
  if (lease_timeout.count() < 1) {
    return Status(ErrorCode::kInvalidArgument, "the lease timeout must be at least 1 ms, not " +
                                                   std::to_string(lease_timeout.count()) + " ms");
  }
  std::unique_ptr<SlotRing> ring(new SlotRing());
  ring->slot_bytes_ = slot_bytes;
  ring->policy_ = policy;
  ring->lease_timeout_ = lease_timeout;
  ring->allocator_name_ = allocator.name;
  auto page = (stamp_allocator != nullptr ? *stamp_allocator : allocator)
                  .allocate(slots * sizeof(std::atomic<std::uint64_t>), "weightsync-stamps");
  if (!page.ok()) return page.status();
  ring->stamp_page_ = std::move(*page);
  ring->stamps_ = static_cast<std::atomic<std::uint64_t>*>(ring->stamp_page_->data());
  for (std::size_t i = 0; i < slots; ++i) new (&ring->stamps_[i]) std::atomic<std::uint64_t>(0);
  ring->slots_.resize(slots);
  for (auto& slot : ring->slots_) {
    auto buffer = allocator.allocate(slot_bytes, "weightsync-slot");
    if (!buffer.ok()) return buffer.status();
    slot.buffer = std::move(*buffer);
  }
  return ring;
}

Result<Reservation> SlotRing::reserve(std::uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (version > (UINT64_MAX >> 1)) {
    return Status(ErrorCode::kInvalidArgument,
                  "version " + std::to_string(version) + " exceeds the maximum 2^63-1");
  }
  if (version == 0 || version <= latest_version_) {
    return Status(ErrorCode::kInvalidArgument, "version " + std::to_string(version) +
                                                   " is not greater than the latest published version " +
                                                   std::to_string(latest_version_.load()) +
                                                   " (versions must strictly increase)");
  }
  // Candidates: every slot but the newest and any being written. Prefer a slot
  // nobody reads, oldest version first; else apply the full-ring policy.
  int free_slot = -1, oldest = -1;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (static_cast<int>(i) == newest_ || s.writing) continue;
    if (oldest < 0 || s.version < slots_[oldest].version) oldest = static_cast<int>(i);
    if (s.live.empty() && (free_slot < 0 || s.version < slots_[free_slot].version)) {
      free_slot = static_cast<int>(i);
    }
  }
  if (oldest < 0) return Status(ErrorCode::kInternal, "no slot can be written (a write is already open?)");
  std::uint32_t revoked = 0;
  int chosen = free_slot;
  if (chosen < 0) {
    const Clock::time_point now = Clock::now();
    if (policy_ == FullRingPolicy::kSkip) {
      // Only a slot whose every lease has outlived the lease timeout may be
      // taken back: the oldest such version.
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        if (static_cast<int>(i) == newest_ || s.writing || !leases_expired_locked(s, now)) continue;
        if (chosen < 0 || s.version < slots_[chosen].version) chosen = static_cast<int>(i);
      }
      if (chosen < 0) {
        ++counters_.skipped;
        return Status(ErrorCode::kBusy, "every slot is being read; version " + std::to_string(version) +
                                            " was skipped (FullRingPolicy::kSkip); publish the next one");
      }
    } else {
      chosen = oldest;
    }
    std::uint32_t expired = 0;
    revoked = revoke_slot_locked(slots_[chosen], now, &expired);
    WS_DEBUG("revoked {} lease(s) ({} expired) on slot {} (version {}) to publish version {}", revoked,
             expired, chosen, slots_[chosen].version, version);
  }
  Slot& slot = slots_[chosen];
  slot.writing = true;
  slot.version = 0;
  slot.has_checksum = false;
  slot.pending = version;
  slot.streaming = false;
  slot.watermark = 0;
  // Seqlock write side. The release fence orders the odd stamp store before
  // every store that follows it, the slot bytes included: a reader that loads
  // any of those bytes and then runs an acquire fence (stamp_after) sees the
  // odd stamp or a later value ([atomics.fences]). commit()'s release store
  // orders the bytes before the even stamp. The mutex takes no part in this.
  stamp(chosen).store((version << 1) | 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  return Reservation{static_cast<std::uint32_t>(chosen), revoked, slot.buffer->data()};
}

void SlotRing::commit(std::uint32_t slot_index, std::uint64_t version,
                      std::optional<std::uint64_t> checksum) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slots_[slot_index];
    slot.writing = false;
    slot.streaming = false;
    slot.pending = 0;
    slot.watermark = 0;
    slot.version = version;
    slot.has_checksum = checksum.has_value();
    slot.checksum = checksum.value_or(0);
    stamp(slot_index).store(version << 1, std::memory_order_release);
    newest_ = static_cast<int>(slot_index);
    latest_version_ = version;
    ++counters_.published;
    changed_locked();
  }
  committed_cv_.notify_all();
}

void SlotRing::abandon(std::uint32_t slot_index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slots_[slot_index];
    // Streaming leases of the abandoned version: revoked, never delivered.
    std::uint32_t expired = 0;
    if (!slot.live.empty()) revoke_slot_locked(slot, Clock::now(), &expired);
    slot.writing = false;
    slot.streaming = false;
    slot.pending = 0;
    slot.watermark = 0;
    slot.version = 0;
    stamp(slot_index).store(0, std::memory_order_release);
    changed_locked();
  }
  committed_cv_.notify_all();
}

Status SlotRing::begin_streaming(std::uint32_t slot_index, std::uint64_t version) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slots_[slot_index];
    if (!slot.writing || slot.streaming) {
      return Status(ErrorCode::kInvalidArgument, "begin_streaming: slot is not reserved, or already streaming");
    }
    if (version == 0 || version > (UINT64_MAX >> 1) || version <= latest_version_) {
      return Status(ErrorCode::kInvalidArgument, "begin_streaming: version " + std::to_string(version) +
                                                     " is not newer than the latest committed " +
                                                     std::to_string(latest_version_.load()));
    }
    slot.pending = version;
    slot.streaming = true;
    slot.watermark = 0;
    // Nobody can hold a lease on a slot being written before this point, so
    // renumbering its odd stamp is invisible.
    stamp(slot_index).store((version << 1) | 1, std::memory_order_release);
    changed_locked();
  }
  committed_cv_.notify_all();
  return Status();
}

void SlotRing::advance_watermark(std::uint32_t slot_index, std::uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slots_[slot_index];
    if (!slot.streaming) return;
    bytes = std::min<std::uint64_t>(bytes, slot_bytes_);
    if (bytes <= slot.watermark) return;
    // The mutex orders the writer's bytes before this store and a reader's
    // load (stream_state) before its read of them.
    slot.watermark = bytes;
    changed_locked();
  }
  committed_cv_.notify_all();
}

std::uint64_t SlotRing::latest_streamable() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint64_t latest = latest_version_;
  for (const Slot& s : slots_) {
    if (s.streaming && s.pending > latest) latest = s.pending;
  }
  return latest;
}

Result<StreamState> SlotRing::stream_state(std::uint64_t session, std::uint64_t lease_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.session != session) {
    return Status(ErrorCode::kInvalidArgument, "unknown lease");
  }
  const Lease& lease = it->second;
  const Slot& slot = slots_[lease.slot];
  if (lease.revoked) {
    return Status(ErrorCode::kVersionRevoked, "version " + std::to_string(lease.version) +
                                                  " was abandoned or taken back; pull again");
  }
  StreamState out;
  const std::uint64_t now_stamp = stamp(lease.slot).load(std::memory_order_acquire);
  if (!slot.writing && slot.version == lease.version && now_stamp == (lease.version << 1)) {
    out.committed = true;
    out.watermark = slot_bytes_;
    out.has_checksum = slot.has_checksum;
    out.checksum = slot.has_checksum ? slot.checksum : 0;
    return out;
  }
  if (slot.streaming && slot.pending == lease.version && now_stamp == lease.stamp) {
    out.watermark = slot.watermark;
    return out;
  }
  return Status(ErrorCode::kVersionRevoked,
                "slot " + std::to_string(lease.slot) + " no longer holds version " + std::to_string(lease.version));
}

std::uint64_t SlotRing::change_epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

void SlotRing::set_change_listener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  change_listener_ = std::move(listener);
}

std::uint64_t SlotRing::wait_change(std::uint64_t seen, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return stopping_ || epoch_ != seen; };
  if (deadline.is_never()) {
    committed_cv_.wait(lock, ready);
  } else {
    committed_cv_.wait_for(lock, std::chrono::milliseconds(deadline.poll_millis()), ready);
  }
  return epoch_;
}

std::uint64_t SlotRing::latest_version() const noexcept {
  return latest_version_.load();
}

Result<LeaseGrant> SlotRing::acquire(std::uint64_t session, std::uint64_t newer_than, bool accept_streaming) {
  auto id = random_id();
  if (!id.ok()) return id.status();
  std::lock_guard<std::mutex> lock(mu_);
  int streamed = -1;  // the newest streaming slot newer than every committed version
  if (accept_streaming) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.streaming && s.pending > latest_version_ && s.pending > newer_than &&
          (streamed < 0 || s.pending > slots_[streamed].pending)) {
        streamed = static_cast<int>(i);
      }
    }
  }
  if (streamed < 0 && (newest_ < 0 || latest_version_ <= newer_than)) {
    return Status(ErrorCode::kNotReady, "no version newer than " + std::to_string(newer_than) +
                                            " is published yet (latest: " + std::to_string(latest_version_) +
                                            ")");
  }
  return grant_locked(session, *id, streamed >= 0 ? streamed : newest_, streamed >= 0);
}

Result<LeaseGrant> SlotRing::acquire_version(std::uint64_t session, std::uint64_t version) {
  auto id = random_id();
  if (!id.ok()) return id.status();
  if (version == 0) return Status(ErrorCode::kInvalidArgument, "version 0 is never published");
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t latest = latest_version_;
  if (newest_ < 0 || version > latest) {
    return Status(ErrorCode::kNotReady, "version " + std::to_string(version) + " is not published yet (latest: " +
                                            std::to_string(latest) + ")");
  }
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.version == version && !s.writing) return grant_locked(session, *id, static_cast<int>(i), false);
  }
  return Status(ErrorCode::kVersionRevoked, "version " + std::to_string(version) +
                                                " is no longer held here (latest: " + std::to_string(latest) +
                                                "); pull a newer one");
}

Result<LeaseGrant> SlotRing::grant_locked(std::uint64_t session, std::uint64_t id, int chosen, bool streamed) {
  auto session_it = sessions_.find(session);
  const std::size_t held = session_it == sessions_.end() ? 0 : session_it->second.size();
  if (held >= kMaxLeasesPerSession) {
    return Status(ErrorCode::kInvalidArgument, "this subscriber already holds " + std::to_string(held) +
                                                   " leases; release one before acquiring another");
  }
  if (leases_.count(id) != 0) return Status(ErrorCode::kBusy, "lease id collision; retry");
  Slot& slot = slots_[chosen];
  LeaseGrant grant{id, slot.version, static_cast<std::uint32_t>(chosen), slot.version << 1, slot.has_checksum,
                   slot.checksum};
  if (streamed) grant = LeaseGrant{id, slot.pending, static_cast<std::uint32_t>(chosen), (slot.pending << 1) | 1,
                                   false, 0};
  slot.live.insert(grant.lease_id);
  sessions_[session].push_back(grant.lease_id);
  leases_.emplace(grant.lease_id,
                  Lease{session, grant.slot, grant.stamp, grant.version, Clock::now(), false});
  ++counters_.active;
  ++counters_.granted;
  return grant;
}

Result<LeaseGrant> SlotRing::check_lease(std::uint64_t session, std::uint64_t lease_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.session != session) {
    return Status(ErrorCode::kInvalidArgument, "unknown lease");
  }
  const Lease& lease = it->second;
  if (lease.revoked) {
    return Status(ErrorCode::kVersionRevoked, "the publisher took slot " + std::to_string(lease.slot) +
                                                  " back for a newer version; pull again");
  }
  const Slot& slot = slots_[lease.slot];
  return LeaseGrant{lease_id, lease.version, lease.slot, lease.stamp, slot.has_checksum, slot.checksum};
}

bool SlotRing::superseded_locked(const Lease& lease) const {
  auto session_it = sessions_.find(lease.session);
  if (session_it == sessions_.end()) return false;
  for (std::uint64_t id : session_it->second) {
    const Lease& other = leases_.at(id);
    if (!other.revoked && other.version > lease.version) return true;
  }
  return false;
}

bool SlotRing::leases_expired_locked(const Slot& slot, Clock::time_point now) const {
  for (std::uint64_t id : slot.live) {
    const Lease& lease = leases_.at(id);
    if (now - lease.granted < lease_timeout_ && !superseded_locked(lease)) return false;
  }
  return true;
}

std::uint32_t SlotRing::revoke_slot_locked(Slot& slot, Clock::time_point now, std::uint32_t* expired) {
  std::uint32_t revoked = 0;
  for (std::uint64_t id : slot.live) {
    Lease& lease = leases_.at(id);
    lease.revoked = true;
    ++revoked;
    if (now - lease.granted >= lease_timeout_) ++*expired;
  }
  slot.live.clear();
  counters_.active -= revoked;
  counters_.revoked += revoked;
  counters_.expired += *expired;
  return revoked;
}

void SlotRing::drop_lease_locked(std::unordered_map<std::uint64_t, Lease>::iterator it) {
  const std::uint64_t id = it->first;
  const Lease& lease = it->second;
  if (!lease.revoked) {
    slots_[lease.slot].live.erase(id);
    --counters_.active;
  }
  auto session_it = sessions_.find(lease.session);
  if (session_it != sessions_.end()) {
    auto& ids = session_it->second;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == id) {
        ids[i] = ids.back();
        ids.pop_back();
        break;
      }
    }
    if (ids.empty()) sessions_.erase(session_it);
  }
  leases_.erase(it);
}

void SlotRing::release(std::uint64_t session, std::uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.session != session) return;
  const Lease& lease = it->second;
  if (!lease.revoked && lease.version >= counters_.slowest_release_version) {
    const double held = std::chrono::duration<double>(Clock::now() - lease.granted).count();
    if (lease.version > counters_.slowest_release_version) counters_.slowest_release_seconds = 0.0;
    counters_.slowest_release_version = lease.version;
    counters_.slowest_release_seconds = std::max(counters_.slowest_release_seconds, held);
  }
  drop_lease_locked(it);
}

void SlotRing::release_session(std::uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto session_it = sessions_.find(session);
  if (session_it == sessions_.end()) return;
  const std::vector<std::uint64_t> ids = session_it->second;  // drop_lease_locked edits the original
  for (std::uint64_t id : ids) {
    auto it = leases_.find(id);
    if (it != leases_.end()) drop_lease_locked(it);
  }
}

std::uint64_t SlotRing::wait_newer(std::uint64_t newer_than, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return stopping_ || latest_version_ > newer_than; };
  if (deadline.is_never()) {
    committed_cv_.wait(lock, ready);
  } else {
    committed_cv_.wait_for(lock, std::chrono::milliseconds(deadline.poll_millis()), ready);
  }
  return latest_version_;
}

void SlotRing::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  committed_cv_.notify_all();
}

bool SlotRing::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

void SlotRing::retire(std::string why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_ = std::move(why);
    changed_locked();
  }
  committed_cv_.notify_all();
}

std::optional<std::string> SlotRing::retired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retired_;
}

std::uint64_t SlotRing::stamp_before(std::uint32_t slot) const noexcept {
  return stamp(slot).load(std::memory_order_acquire);
}

std::uint64_t SlotRing::stamp_after(std::uint32_t slot) const noexcept {
  std::atomic_thread_fence(std::memory_order_acquire);
  return stamp(slot).load(std::memory_order_relaxed);
}

RingStats SlotRing::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace weightsync::detail
