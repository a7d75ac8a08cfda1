// SlotRing: slot choice, seqlock stamps, leases and the full-ring policies.
#include <catch2/catch.hpp>

#include "ring/slot_ring.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {
std::unique_ptr<SlotRing> make_ring(std::size_t slots, FullRingPolicy policy) {
  auto ring = SlotRing::create(slots, 4096, policy, memfd_slot_allocator(false));
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
  PublisherStats stats;
  ring->fill_stats(&stats);
  CHECK(stats.leases_revoked == 1);
  CHECK(stats.leases_active == 1);
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
  PublisherStats stats;
  ring->fill_stats(&stats);
  CHECK(stats.leases_active == 0);
  for (std::size_t i = 0; i < SlotRing::kMaxLeasesPerSession; ++i) REQUIRE(ring->acquire(13, 0).ok());
  CHECK_FALSE(ring->acquire(13, 0).ok());  // bounded per session
}
