// SlotRing: slot choice, seqlock stamps, leases and the full-ring policies.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "ring/slot_ring.h"
#include "transport/direct_copy.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {
constexpr std::chrono::milliseconds kLongLeaseTimeout{60000};

std::unique_ptr<SlotRing> make_ring(std::size_t slots, FullRingPolicy policy,
                                    std::chrono::milliseconds lease_timeout = kLongLeaseTimeout) {
  auto ring = SlotRing::create(slots, 4096, policy, lease_timeout, memfd_slot_allocator(false));
  REQUIRE(ring.ok());
  return std::move(*ring);
}
void publish(SlotRing& ring, std::uint64_t version) {
  auto r = ring.reserve(version);
  REQUIRE(r.ok());
  ring.commit(r->slot, version, std::nullopt);
}
}  // namespace

TEST_CASE("ring: stamps encode versions and the newest slot is never rewritten", "[ring]") {
  auto ring = make_ring(2, FullRingPolicy::kRevokeOldest);
  CHECK(ring->latest_version() == 0);
  auto none = ring->acquire(1, 0);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == ErrorCode::kNotReady);

  auto r1 = ring->reserve(1);
  REQUIRE(r1.ok());
  CHECK(ring->stamp_before(r1->slot) == ((1u << 1) | 1));  // odd while writing
  ring->commit(r1->slot, 1, std::nullopt);
  CHECK(ring->stamp_before(r1->slot) == 2);
  auto r2 = ring->reserve(2);
  REQUIRE(r2.ok());
  CHECK(r2->slot != r1->slot);  // never the newest
  ring->commit(r2->slot, 2, std::nullopt);
  auto r3 = ring->reserve(3);
  REQUIRE(r3.ok());
  CHECK(r3->slot == r1->slot);  // the oldest, not the newest
  ring->abandon(r3->slot);
  CHECK(ring->stamp_before(r3->slot) == 0);
  CHECK(ring->latest_version() == 2);
}

TEST_CASE("ring: acquire_version leases exactly that version, or says not yet or no longer held", "[ring]") {
  auto ring = make_ring(3, FullRingPolicy::kRevokeOldest);
  auto early = ring->acquire_version(1, 1);
  CHECK(early.status().code() == ErrorCode::kNotReady);
  publish(*ring, 1);
  publish(*ring, 2);
  publish(*ring, 3);
  auto one = ring->acquire_version(1, 1);
  REQUIRE(one.ok());
  CHECK(one->version == 1);  // not the newest
  CHECK(one->stamp == (1u << 1));
  ring->release(1, one->lease_id);
  CHECK(ring->acquire_version(1, 4).status().code() == ErrorCode::kNotReady);
  CHECK(ring->acquire_version(1, 0).status().code() == ErrorCode::kInvalidArgument);
  publish(*ring, 4);  // takes version 1's slot
  auto gone = ring->acquire_version(1, 1);
  CHECK(gone.status().code() == ErrorCode::kVersionRevoked);
  // A version being written is not leased, even under its number.
  auto writing = ring->reserve(5);
  REQUIRE(writing.ok());
  CHECK(ring->acquire_version(1, 5).status().code() == ErrorCode::kNotReady);
  ring->commit(writing->slot, 5, std::nullopt);
  auto five = ring->acquire_version(1, 5);
  REQUIRE(five.ok());
  CHECK(five->slot == writing->slot);
}

TEST_CASE("ring: versions must strictly increase", "[ring]") {
  auto ring = make_ring(3, FullRingPolicy::kRevokeOldest);
  publish(*ring, 5);
  for (std::uint64_t v : {0ull, 4ull, 5ull}) {
    auto r = ring->reserve(v);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  }
  publish(*ring, 6);
}

TEST_CASE("ring: a full ring revokes the oldest lease under kRevokeOldest", "[ring]") {
  auto ring = make_ring(2, FullRingPolicy::kRevokeOldest);
  publish(*ring, 1);
  auto lease1 = ring->acquire(/*session=*/7, 0);  // reader holds v1
  REQUIRE(lease1.ok());
  publish(*ring, 2);                  // goes to the free slot
  auto lease2 = ring->acquire(8, 1);  // another reader holds v2 (newest)
  REQUIRE(lease2.ok());
  auto r3 = ring->reserve(3);  // must not wait: revokes v1's slot
  REQUIRE(r3.ok());
  CHECK(r3->revoked == 1);
  CHECK(r3->slot == lease1->slot);
  auto check = ring->check_lease(7, lease1->lease_id);
  REQUIRE_FALSE(check.ok());
  CHECK(check.status().code() == ErrorCode::kVersionRevoked);
  CHECK(ring->stamp_before(lease1->slot) != lease1->stamp);
  CHECK(ring->check_lease(8, lease2->lease_id).ok());
  ring->commit(r3->slot, 3, std::nullopt);
  RingStats stats = ring->stats();
  CHECK(stats.revoked == 1);
  CHECK(stats.expired == 0);  // the lease was young: revoked, not expired
  CHECK(stats.active == 1);
}

TEST_CASE("ring: a full ring skips the version under kSkip and disturbs no reader", "[ring]") {
  auto ring = make_ring(2, FullRingPolicy::kSkip);
  publish(*ring, 1);
  auto lease1 = ring->acquire(7, 0);
  REQUIRE(lease1.ok());
  publish(*ring, 2);
  auto r3 = ring->reserve(3);
  REQUIRE_FALSE(r3.ok());
  CHECK(r3.status().code() == ErrorCode::kBusy);
  CHECK(ring->check_lease(7, lease1->lease_id).ok());
  CHECK(ring->latest_version() == 2);
  ring->release(7, lease1->lease_id);
  publish(*ring, 3);  // room again once the reader lets go
  CHECK(ring->latest_version() == 3);
}

TEST_CASE("ring: leases belong to a session and die with it", "[ring]") {
  auto ring = make_ring(3, FullRingPolicy::kRevokeOldest);
  publish(*ring, 1);
  auto a = ring->acquire(11, 0);
  auto b = ring->acquire(11, 0);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->lease_id != b->lease_id);
  auto foreign = ring->check_lease(12, a->lease_id);  // another session cannot use it
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.status().code() == ErrorCode::kInvalidArgument);
  ring->release_session(11);
  CHECK(ring->stats().active == 0);
  for (std::size_t i = 0; i < SlotRing::kMaxLeasesPerSession; ++i) REQUIRE(ring->acquire(13, 0).ok());
  CHECK_FALSE(ring->acquire(13, 0).ok());  // bounded per session
}

TEST_CASE("ring: the per-session lease cap holds and is given back by release and session end", "[ring]") {
  auto ring = make_ring(3, FullRingPolicy::kRevokeOldest);
  publish(*ring, 1);
  std::vector<LeaseGrant> mine;
  for (std::size_t i = 0; i < SlotRing::kMaxLeasesPerSession; ++i) {
    auto lease = ring->acquire(21, 0);
    REQUIRE(lease.ok());
    mine.push_back(*lease);
  }
  auto over = ring->acquire(21, 0);
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().code() == ErrorCode::kInvalidArgument);
  auto other = ring->acquire(22, 0);  // the cap is per session
  REQUIRE(other.ok());
  CHECK(ring->stats().active == SlotRing::kMaxLeasesPerSession + 1);

  ring->release(22, mine[0].lease_id);  // another session's release is ignored
  CHECK_FALSE(ring->acquire(21, 0).ok());
  ring->release(21, mine[0].lease_id);  // one back: one more may be taken
  auto again = ring->acquire(21, 0);
  REQUIRE(again.ok());
  CHECK_FALSE(ring->acquire(21, 0).ok());

  // Revoked leases still count until they are released.
  auto ring2 = make_ring(2, FullRingPolicy::kRevokeOldest);
  publish(*ring2, 1);
  for (std::size_t i = 0; i < SlotRing::kMaxLeasesPerSession; ++i) REQUIRE(ring2->acquire(31, 0).ok());
  publish(*ring2, 2);
  auto r3 = ring2->reserve(3);  // revokes all 8 on version 1's slot
  REQUIRE(r3.ok());
  CHECK(r3->revoked == SlotRing::kMaxLeasesPerSession);
  ring2->commit(r3->slot, 3, std::nullopt);
  CHECK(ring2->stats().active == 0);
  CHECK_FALSE(ring2->acquire(31, 0).ok());
  ring2->release_session(31);
  for (std::size_t i = 0; i < SlotRing::kMaxLeasesPerSession; ++i) REQUIRE(ring2->acquire(31, 0).ok());

  // Ending a session frees exactly its leases, and its cap.
  ring->release_session(21);
  CHECK(ring->stats().active == 1);  // session 22's lease
  CHECK(ring->check_lease(22, other->lease_id).ok());
  auto gone = ring->check_lease(21, again->lease_id);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.status().code() == ErrorCode::kInvalidArgument);
  for (std::size_t i = 0; i < SlotRing::kMaxLeasesPerSession; ++i) REQUIRE(ring->acquire(21, 0).ok());
  CHECK_FALSE(ring->acquire(21, 0).ok());
  CHECK(ring->stats().active == SlotRing::kMaxLeasesPerSession + 1);
  CHECK(ring->stats().granted == 2 * SlotRing::kMaxLeasesPerSession + 2);
}

TEST_CASE("ring: a lease timeout below 1 ms is refused", "[ring]") {
  auto ring = SlotRing::create(2, 4096, FullRingPolicy::kSkip, std::chrono::milliseconds(0),
                               memfd_slot_allocator(false));
  REQUIRE_FALSE(ring.ok());
  CHECK(ring.status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("ring: under kSkip a slot whose leases all outlived the lease timeout is taken back", "[ring]") {
  constexpr auto kTimeout = std::chrono::milliseconds(250);
  auto ring = make_ring(3, FullRingPolicy::kSkip, kTimeout);
  // Three readers (sessions 7, 8, 9) each lease one version as it appears and never let go.
  std::vector<LeaseGrant> held;
  for (std::uint64_t v = 1; v <= 3; ++v) {
    publish(*ring, v);
    auto lease = ring->acquire(6 + v, v - 1);
    REQUIRE(lease.ok());
    held.push_back(*lease);
  }
  const auto t0 = SlotRing::Clock::now();
  auto young = ring->reserve(4);
  REQUIRE_FALSE(young.ok());  // every candidate has a young lease
  CHECK(young.status().code() == ErrorCode::kBusy);
  REQUIRE(SlotRing::Clock::now() - t0 < kTimeout);  // else this machine was too slow to tell
  std::this_thread::sleep_for(kTimeout + std::chrono::milliseconds(50));
  auto r4 = ring->reserve(4);
  REQUIRE(r4.ok());
  CHECK(r4->slot == held[0].slot);  // the oldest version's slot
  CHECK(r4->revoked == 1);
  auto check = ring->check_lease(7, held[0].lease_id);
  REQUIRE_FALSE(check.ok());
  CHECK(check.status().code() == ErrorCode::kVersionRevoked);
  CHECK(ring->stamp_before(held[0].slot) != held[0].stamp);
  CHECK(ring->check_lease(8, held[1].lease_id).ok());
  CHECK(ring->check_lease(9, held[2].lease_id).ok());
  ring->commit(r4->slot, 4, std::nullopt);
  RingStats stats = ring->stats();
  CHECK(stats.skipped == 1);
  CHECK(stats.revoked == 1);
  CHECK(stats.expired == 1);
  CHECK(stats.active == 2);
  CHECK(stats.published == 4);
}

// Issue 30, finding 13: one session protects one version at a time. Its
// leases on older versions are superseded by its newest and may be taken
// back under kSkip at once; another session's young lease still holds.
TEST_CASE("ring: under kSkip a session's older leases are superseded by its newest and hold no slot",
          "[ring][finding13]") {
  auto ring = make_ring(3, FullRingPolicy::kSkip, std::chrono::seconds(60));
  std::vector<LeaseGrant> hoarded;
  for (std::uint64_t v = 1; v <= 3; ++v) {
    publish(*ring, v);
    auto lease = ring->acquire(7, v - 1);
    REQUIRE(lease.ok());
    hoarded.push_back(*lease);
  }
  // Before the fix: kBusy for a minute. Now version 1's slot is free to take.
  auto r4 = ring->reserve(4);
  REQUIRE(r4.ok());
  CHECK(r4->slot == hoarded[0].slot);
  CHECK(r4->revoked == 1);
  ring->commit(r4->slot, 4, std::nullopt);
  CHECK(ring->check_lease(7, hoarded[0].lease_id).status().code() == ErrorCode::kVersionRevoked);
  CHECK(ring->check_lease(7, hoarded[1].lease_id).ok());  // untouched until its slot is needed
  CHECK(ring->stats().expired == 0);                       // superseded, not expired
  // Another session's young lease on version 2 keeps that slot, while
  // version 3's slot holds only the hoarder's lease, superseded once the
  // hoarder leases version 4.
  auto other = ring->acquire_version(8, 2);
  REQUIRE(other.ok());
  REQUIRE(ring->acquire(7, 3).ok());  // the hoarder's newest is now version 4 (the newest slot)
  auto r5 = ring->reserve(5);
  REQUIRE(r5.ok());
  CHECK(r5->slot == hoarded[2].slot);  // version 3's; version 2's is held by session 8
  ring->commit(r5->slot, 5, std::nullopt);
  CHECK(ring->check_lease(8, other->lease_id).ok());
  // Now the candidates are version 2's slot (session 8's only lease) and
  // version 4's (the hoarder's newest): both protected, so kBusy.
  auto r6 = ring->reserve(6);
  REQUIRE_FALSE(r6.ok());
  CHECK(r6.status().code() == ErrorCode::kBusy);
}

TEST_CASE("ring: under kSkip one young lease keeps a slot even beside expired ones", "[ring]") {
  constexpr auto kTimeout = std::chrono::milliseconds(250);
  auto ring = make_ring(2, FullRingPolicy::kSkip, kTimeout);
  publish(*ring, 1);
  auto old_lease = ring->acquire(7, 0);
  REQUIRE(old_lease.ok());
  std::this_thread::sleep_for(kTimeout + std::chrono::milliseconds(50));
  const auto t0 = SlotRing::Clock::now();
  auto young_lease = ring->acquire(8, 0);  // version 1 again, now with a young lease
  REQUIRE(young_lease.ok());
  publish(*ring, 2);  // the free slot
  auto busy = ring->reserve(3);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.status().code() == ErrorCode::kBusy);
  REQUIRE(SlotRing::Clock::now() - t0 < kTimeout);  // else this machine was too slow to tell
  CHECK(ring->check_lease(7, old_lease->lease_id).ok());
  std::this_thread::sleep_for(kTimeout + std::chrono::milliseconds(50));
  auto r3 = ring->reserve(3);
  REQUIRE(r3.ok());
  CHECK(r3->revoked == 2);
  CHECK(ring->check_lease(7, old_lease->lease_id).status().code() == ErrorCode::kVersionRevoked);
  CHECK(ring->check_lease(8, young_lease->lease_id).status().code() == ErrorCode::kVersionRevoked);
  ring->abandon(r3->slot);
  RingStats stats = ring->stats();
  CHECK(stats.expired == 2);
  CHECK(stats.revoked == 2);
  CHECK(stats.active == 0);
}

TEST_CASE("ring: under kRevokeOldest revocations of old leases are counted as expired", "[ring]") {
  constexpr auto kTimeout = std::chrono::milliseconds(250);
  auto ring = make_ring(2, FullRingPolicy::kRevokeOldest, kTimeout);
  publish(*ring, 1);
  const auto t0 = SlotRing::Clock::now();
  REQUIRE(ring->acquire(7, 0).ok());
  publish(*ring, 2);
  auto young = ring->reserve(3);  // revoked at once, young as it is
  REQUIRE(young.ok());
  CHECK(young->revoked == 1);
  REQUIRE(SlotRing::Clock::now() - t0 < kTimeout);  // else this machine was too slow to tell
  ring->commit(young->slot, 3, std::nullopt);
  CHECK(ring->stats().expired == 0);
  REQUIRE(ring->acquire(7, 0).ok());  // version 3
  publish(*ring, 4);
  REQUIRE(ring->acquire(8, 0).ok());  // version 4, so no slot is free
  std::this_thread::sleep_for(kTimeout + std::chrono::milliseconds(50));
  auto old = ring->reserve(5);
  REQUIRE(old.ok());
  CHECK(old->revoked == 1);
  ring->commit(old->slot, 5, std::nullopt);
  RingStats stats = ring->stats();
  CHECK(stats.revoked == 2);
  CHECK(stats.expired == 1);
  CHECK(stats.skipped == 0);
}

TEST_CASE("ring: a streaming in-progress version is leased only by streaming readers, abandon revokes it",
          "[ring][pipelined]") {
  auto ring = make_ring(3, FullRingPolicy::kRevokeOldest);
  publish(*ring, 1);
  auto r = ring->reserve(2);
  REQUIRE(r.ok());
  // Not yet streaming: nobody sees it.
  CHECK(ring->acquire(7, 1, true).status().code() == ErrorCode::kNotReady);
  REQUIRE(ring->begin_streaming(r->slot, 3).ok());  // renumbered to the version actually pulled
  CHECK(ring->stamp_before(r->slot) == ((3u << 1) | 1));
  CHECK(ring->latest_version() == 1);
  CHECK(ring->latest_streamable() == 3);
  // A plain reader: committed version 1 only.
  auto plain = ring->acquire(7, 0);
  REQUIRE(plain.ok());
  CHECK(plain->version == 1);
  CHECK(ring->acquire(7, 1).status().code() == ErrorCode::kNotReady);
  // A streaming reader: the in-progress version, odd stamp, no checksum.
  auto streamed = ring->acquire(8, 1, true);
  REQUIRE(streamed.ok());
  CHECK(streamed->version == 3);
  CHECK(streamed->stamp == ((3u << 1) | 1));
  CHECK_FALSE(streamed->has_checksum);
  auto state = ring->stream_state(8, streamed->lease_id);
  REQUIRE(state.ok());
  CHECK(state->watermark == 0);
  const std::uint64_t epoch = ring->change_epoch();
  ring->advance_watermark(r->slot, 1024);
  ring->advance_watermark(r->slot, 512);  // never backwards
  CHECK(ring->change_epoch() != epoch);
  CHECK(ring->stream_state(8, streamed->lease_id)->watermark == 1024);
  ring->advance_watermark(r->slot, 1u << 30);  // capped at the slot
  CHECK(ring->stream_state(8, streamed->lease_id)->watermark == 4096);
  CHECK(ring->stream_state(7, streamed->lease_id).status().code() == ErrorCode::kInvalidArgument);
  ring->abandon(r->slot);
  CHECK(ring->stream_state(8, streamed->lease_id).status().code() == ErrorCode::kVersionRevoked);
  CHECK(ring->check_lease(8, streamed->lease_id).status().code() == ErrorCode::kVersionRevoked);
  CHECK(ring->latest_streamable() == 1);

  // Again, committed this time: the streaming lease becomes one of the committed version.
  auto again = ring->reserve(3);
  REQUIRE(again.ok());
  CHECK(ring->begin_streaming(again->slot, 1).code() == ErrorCode::kInvalidArgument);  // not newer
  REQUIRE(ring->begin_streaming(again->slot, 3).ok());
  auto second = ring->acquire(8, 1, true);
  REQUIRE(second.ok());
  ring->commit(again->slot, 3, 0x77);
  auto done = ring->stream_state(8, second->lease_id);
  REQUIRE(done.ok());
  CHECK(done->committed);
  CHECK(done->watermark == 4096);
  CHECK(done->has_checksum);
  CHECK(done->checksum == 0x77);
  // The old revoked lease stays revoked even though the slot now holds version 3 again.
  CHECK(ring->stream_state(8, streamed->lease_id).status().code() == ErrorCode::kVersionRevoked);
}

// The reader's no-round-trip check (shm): a writer that commits one slot and
// opens the other between the reader's two stamp loads must not make the
// reader see "nothing committed" (the race behind a kNotReady pull in CI).
TEST_CASE("ring: the mapped-stamp check never reports less than was committed before it, under a lapping writer",
          "[ring][race]") {
  auto ring = make_ring(2, FullRingPolicy::kRevokeOldest);
  const auto* stamps = static_cast<const std::atomic<std::uint64_t>*>(ring->stamp_region().data());
  std::atomic<std::uint64_t> committed{0};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (std::uint64_t v = 1; !stop.load(std::memory_order_relaxed) && v < (1u << 30); ++v) {
      auto slot = ring->reserve(v);
      if (!slot.ok()) return;
      ring->commit(slot->slot, v, std::nullopt);
      committed.store(v, std::memory_order_release);
    }
  });
  while (committed.load() == 0) std::this_thread::yield();
  std::uint64_t calls = 0, answered = 0, too_old = 0, worst_before = 0, worst_seen = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end && calls < 20'000'000) {
    const std::uint64_t before = committed.load(std::memory_order_acquire);
    const auto seen = newest_committed_stamp(stamps, ring->slot_count());
    ++calls;
    if (!seen) continue;
    ++answered;
    if (*seen < before) {
      if (too_old++ == 0) worst_before = before, worst_seen = *seen;
    }
  }
  stop = true;
  writer.join();
  INFO(calls << " checks, " << answered << " answered, " << too_old << " older than already committed (first: saw "
             << worst_seen << " after " << worst_before << " was committed)");
  CHECK(too_old == 0);
  CHECK(answered > calls / 2);  // an unstable page is retried, rarely given up on
}
