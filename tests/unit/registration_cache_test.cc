// RegistrationCache: registrations found by address range, made once per
// region, dropped by release() (the subscriber's registration lifecycle).
#include <catch2/catch.hpp>

#include <vector>

#include "transport/registration_cache.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {

// A registrar that records what is registered and what is still alive.
struct FakeRegistrar {
  std::vector<std::pair<void*, std::size_t>> made;
  std::shared_ptr<int> alive = std::make_shared<int>(0);
  RegistrationCache::Registrar registrar() {
    return [this](void* p, std::size_t n) -> Result<RegistrationCache::Registration> {
      made.emplace_back(p, n);
      ++*alive;
      auto counter = alive;
      auto* handle = new int(static_cast<int>(made.size()));
      return RegistrationCache::Registration{handle, std::shared_ptr<void>(handle, [counter](void* h) {
                                               --*counter;
                                               delete static_cast<int*>(h);
                                             })};
    };
  }
};

}  // namespace

TEST_CASE("registration cache: one registration serves every piece inside it, until released",
          "[registrations]") {
  FakeRegistrar fake;
  RegistrationCache cache(fake.registrar());
  std::vector<char> arena(1 << 20);
  char* base = arena.data();
  REQUIRE(cache.add(base, arena.size()).ok());
  CHECK(cache.registrations() == 1);
  // Pieces inside the arena use it: no new registration, the same handle.
  auto first = cache.covering(base + 100, 4096);
  auto second = cache.covering(base + 500000, 8);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(*first == *second);
  CHECK(cache.registrations() == 1);
  // Registering inside a registered region is a no-op.
  REQUIRE(cache.add(base + 10, 10).ok());
  CHECK(cache.registrations() == 1);
  // A piece reaching past it gets its own registration, made once.
  REQUIRE(cache.covering(base + arena.size() - 8, 16).ok());
  REQUIRE(cache.covering(base + arena.size() - 8, 16).ok());
  CHECK(cache.registrations() == 2);
  // Release drops every registration overlapping the range and deregisters it.
  const auto generation = cache.generation();
  CHECK(cache.release(base, arena.size()) == 2);
  CHECK(cache.released() == 2);
  CHECK(cache.generation() > generation);
  CHECK(*fake.alive == 0);
  CHECK(cache.live() == 0);
  // The next use registers again.
  REQUIRE(cache.covering(base + 100, 4096).ok());
  CHECK(cache.registrations() == 3);
  CHECK(fake.made.back() == std::make_pair(static_cast<void*>(base + 100), std::size_t{4096}));
  cache.clear();
  CHECK(*fake.alive == 0);
}

TEST_CASE("registration cache: a region registered over earlier pieces replaces them", "[registrations]") {
  FakeRegistrar fake;
  RegistrationCache cache(fake.registrar());
  std::vector<char> arena(1 << 16);
  char* base = arena.data();
  for (int i = 0; i < 20; ++i) REQUIRE(cache.covering(base + i * 1024, 512).ok());
  CHECK(cache.live() == 20);
  REQUIRE(cache.add(base, arena.size()).ok());
  CHECK(cache.live() == 1);  // the 20 small ones were inside: dropped
  CHECK(*fake.alive == 1);
  REQUIRE(cache.covering(base + 19 * 1024, 512).ok());
  CHECK(cache.registrations() == 21);
  // Releasing an unrelated range drops nothing.
  std::vector<char> other(4096);
  CHECK(cache.release(other.data(), other.size()) == 0);
  CHECK(cache.live() == 1);
  CHECK(cache.covering(nullptr, 8).status().code() == ErrorCode::kInvalidArgument);
}
