// HostBuffer: page-aligned, zero-filled, optionally locked, move-only owner.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>

#include "weightsync/memory.h"

using namespace weightsync;

TEST_CASE("memory: host buffers are page-aligned, zeroed, lockable and move-only owners", "[memory]") {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto buffer = HostBuffer::allocate(10000);
  REQUIRE(buffer.ok());
  CHECK(reinterpret_cast<std::uintptr_t>(buffer->data()) % page == 0);
  CHECK(buffer->size() == 10000);
  CHECK_FALSE(buffer->locked());
  const auto* bytes = static_cast<const unsigned char*>(buffer->data());
  bool zero = true;
  for (std::size_t i = 0; i < buffer->size(); ++i) zero = zero && bytes[i] == 0;
  CHECK(zero);

  HostBuffer moved = std::move(*buffer);
  CHECK(buffer->data() == nullptr);
  CHECK(moved.data() == bytes);

  CHECK(HostBuffer::allocate(0).status().code() == ErrorCode::kInvalidArgument);

  rlimit limit{};
  ::getrlimit(RLIMIT_MEMLOCK, &limit);
  auto locked = HostBuffer::allocate(1 << 16, /*lock=*/true);
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= (1u << 16) || ::geteuid() == 0) {
    REQUIRE(locked.ok());
    CHECK(locked->locked());
  } else {
    REQUIRE_FALSE(locked.ok());
    CHECK(locked.status().code() == ErrorCode::kInvalidConfig);
    CHECK_THAT(locked.status().message(), Catch::Contains("RLIMIT_MEMLOCK"));
  }
  // More than the limit always fails with a message saying what to do.
  if (limit.rlim_cur != RLIM_INFINITY && ::geteuid() != 0) {
    auto too_much = HostBuffer::allocate(limit.rlim_cur * 2 + page, true);
    REQUIRE_FALSE(too_much.ok());
    CHECK_THAT(too_much.status().message(), Catch::Contains("ulimit -l"));
  }
}

TEST_CASE("memory: buffers of 2 MiB or more start on a huge-page boundary and are fully usable", "[memory]") {
  for (std::size_t bytes : {std::size_t{2} << 20, (std::size_t{5} << 20) + 123}) {
    auto buffer = HostBuffer::allocate(bytes);
    REQUIRE(buffer.ok());
    CHECK(reinterpret_cast<std::uintptr_t>(buffer->data()) % (std::uintptr_t{2} << 20) == 0);
    // The trimmed reservation left the whole buffer mapped, writable and zeroed.
    auto* bytes_ptr = static_cast<unsigned char*>(buffer->data());
    CHECK(bytes_ptr[0] == 0);
    CHECK(bytes_ptr[bytes - 1] == 0);
    bytes_ptr[0] = 1;
    bytes_ptr[bytes - 1] = 2;
    CHECK(bytes_ptr[bytes - 1] == 2);
  }
}
