// Helpers for tests that speak the wire protocol by hand, as a hostile or
// broken peer would: a raw TCP connection to the publisher and raw bytes.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "net/socket.h"
#include "wire/frame_io.h"
#include "wire/messages.h"

namespace wstest {

// A plain TCP connection to `address` ("host:port"); fails the test if none.
inline weightsync::detail::Socket raw_connect(const std::string& address) {
  using namespace weightsync::detail;
  auto target = parse_host_port(address);
  REQUIRE(target.ok());
  auto s = connect_tcp(*target, Deadline::after(std::chrono::seconds(5)));
  REQUIRE(s.ok());
  return std::move(*s);
}

// Sends `bytes` (best effort: the publisher may already have closed).
inline void send_bytes(const weightsync::detail::Socket& s, const std::vector<std::uint8_t>& bytes) {
  using namespace weightsync::detail;
  (void)send_all(s, bytes.data(), bytes.size(), Deadline::after(std::chrono::seconds(2)), "publisher");
}

// ACQUIRE on an authenticated control connection: the lease of the newest
// version; fails the test if the publisher grants none.
inline weightsync::detail::LeaseMsg raw_acquire(const weightsync::detail::Socket& control,
                                                weightsync::detail::Deadline deadline) {
  using namespace weightsync::detail;
  REQUIRE(write_frame(control, MsgType::kAcquire, AcquireMsg{0}.encode(), deadline, "p").ok());
  auto lease_frame = read_expected(control, MsgType::kLease, kMaxReplyPayload, deadline, "p");
  REQUIRE(lease_frame.ok());
  auto lease = LeaseMsg::decode(lease_frame->payload);
  REQUIRE(lease.ok());
  return *lease;
}

}  // namespace wstest
