// ViewRegistry: views' bounds, their checksums (equal to hashing the same
// ranges by hand), the per-version cache, and pre-hashing after a commit.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/checksum.h"
#include "publisher/view_registry.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {

constexpr std::size_t kSlotBytes = 1 << 16;

std::unique_ptr<SlotRing> make_ring() {
  auto ring = SlotRing::create(3, kSlotBytes, FullRingPolicy::kRevokeOldest, std::chrono::seconds(60),
                               memfd_slot_allocator(false));
  REQUIRE(ring.ok());
  return std::move(*ring);
}

// Commits `version` with every byte set to `fill`; returns its slot.
std::uint32_t publish(SlotRing& ring, std::uint64_t version, unsigned char fill) {
  auto r = ring.reserve(version);
  REQUIRE(r.ok());
  std::memset(r->data, fill, kSlotBytes);
  static_cast<unsigned char*>(r->data)[version] = 0x5a;  // versions differ in more than the fill
  ring.commit(r->slot, version, std::nullopt);
  return r->slot;
}

std::uint64_t hash_by_hand(const SlotRing& ring, std::uint32_t slot, const std::vector<ViewEntry>& entries) {
  StreamHasher h;
  const auto* base = static_cast<const char*>(ring.slot_data(slot));
  for (const auto& e : entries) {
    for (std::uint64_t i = 0; i < e.count; ++i) h.update(base + e.offset + i * e.stride, e.length);
  }
  return h.digest();
}

}  // namespace

TEST_CASE("view registry: a view's checksum is the hash of its ranges in order, cached per version",
          "[views]") {
  auto ring = make_ring();
  ViewRegistry views(kSlotBytes);
  const std::vector<ViewEntry> entries = {{4096, 64, 16, 256}, {0, 100, 1, 0}};
  auto view = views.add(7, RegisterViewMsg{0, entries});
  REQUIRE(view.ok());
  const std::uint32_t slot = publish(*ring, 1, 0x11);
  auto sum = views.checksum(7, view->view_id, *ring, slot, 1u << 1);
  REQUIRE(sum.ok());
  CHECK(*sum == hash_by_hand(*ring, slot, entries));
  CHECK(views.checksum(7, view->view_id, *ring, slot, 1u << 1).ok());
  CHECK(views.counters().hashed_on_lease == 1);  // the second lease found it cached
  // Another session cannot use it; a stale stamp is a revoked version.
  CHECK(views.checksum(8, view->view_id, *ring, slot, 1u << 1).status().code() == ErrorCode::kInvalidArgument);
  CHECK(views.checksum(7, view->view_id, *ring, slot, 9u << 1).status().code() == ErrorCode::kVersionRevoked);
  views.release_session(7);
  CHECK(views.checksum(7, view->view_id, *ring, slot, 1u << 1).status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("view registry: after a commit, views leased at the previous version are hashed ahead of the lease",
          "[views]") {
  auto ring = make_ring();
  ViewRegistry views(kSlotBytes);
  views.start_prehashing(ring.get());
  const std::vector<ViewEntry> hot_entries = {{0, 512, 8, 1024}};
  const std::vector<ViewEntry> cold_entries = {{100, 10, 1, 0}};
  auto hot = views.add(1, RegisterViewMsg{0, hot_entries});
  auto cold = views.add(2, RegisterViewMsg{0, cold_entries});
  REQUIRE(hot.ok());
  REQUIRE(cold.ok());
  std::uint32_t slot = publish(*ring, 1, 0x22);
  views.committed(slot, 1u << 1);
  REQUIRE(views.checksum(1, hot->view_id, *ring, slot, 1u << 1).ok());  // leased at version 1
  // Versions 2 and 3: the cold view, never leased since version 1 was hashed
  // (version 1's pre-hash may have covered it), goes cold; the hot one is
  // leased every version and pre-hashed each time.
  for (std::uint64_t v = 2; v <= 4; ++v) {
    slot = publish(*ring, v, static_cast<unsigned char>(0x30 + v));
    const auto before = views.counters();
    views.committed(slot, v << 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (views.counters().prehashed == before.prehashed && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    auto sum = views.checksum(1, hot->view_id, *ring, slot, v << 1);
    REQUIRE(sum.ok());
    CHECK(*sum == hash_by_hand(*ring, slot, hot_entries));
    CHECK(views.counters().hashed_on_lease == before.hashed_on_lease);  // ready before the lease asked
  }
  const auto before_cold = views.counters();
  auto cold_sum = views.checksum(2, cold->view_id, *ring, slot, 4u << 1);
  REQUIRE(cold_sum.ok());
  CHECK(*cold_sum == hash_by_hand(*ring, slot, cold_entries));
  CHECK(views.counters().hashed_on_lease == before_cold.hashed_on_lease + 1);  // cold: hashed on lease
}
