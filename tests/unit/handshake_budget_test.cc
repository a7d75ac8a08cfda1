// HandshakeBudget: which unauthenticated connection gives way when a cap is
// reached (publisher/handshake_budget.h).
#include <catch2/catch.hpp>

#include "publisher/handshake_budget.h"

using weightsync::detail::HandshakeBudget;

namespace {
HandshakeBudget::Clock::time_point at(int ms) {
  return HandshakeBudget::Clock::time_point{} + std::chrono::milliseconds(ms);
}
}  // namespace

TEST_CASE("handshake budget: past the total cap the connection that waited longest is evicted",
          "[handshake-budget]") {
  HandshakeBudget budget(3, 100);
  CHECK_FALSE(budget.admit(1, "", at(0)));
  CHECK_FALSE(budget.admit(2, "", at(1)));
  CHECK_FALSE(budget.admit(3, "", at(2)));
  budget.touch(1, at(3));  // 1 answered: it moves to the back
  auto evicted = budget.admit(4, "", at(4));
  REQUIRE(evicted);
  CHECK(*evicted == 2);
  budget.remove(2);
  CHECK(budget.size() == 3);
}

TEST_CASE("handshake budget: one address over its cap evicts its own oldest, not another's",
          "[handshake-budget]") {
  HandshakeBudget budget(100, 2);
  CHECK_FALSE(budget.admit(1, "10.0.0.1", at(0)));  // the honest peer, oldest of all
  CHECK_FALSE(budget.admit(2, "10.0.0.9", at(1)));
  CHECK_FALSE(budget.admit(3, "10.0.0.9", at(2)));
  auto evicted = budget.admit(4, "10.0.0.9", at(3));
  REQUIRE(evicted);
  CHECK(*evicted == 2);
  budget.remove(2);
  // Local peers (empty address) share no per-address cap.
  for (std::uint64_t id = 10; id < 20; ++id) CHECK_FALSE(budget.admit(id, "", at(10 + static_cast<int>(id))));
  CHECK(budget.size() == 13);
}
