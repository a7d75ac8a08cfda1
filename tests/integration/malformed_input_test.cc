// Malformed input sent to the publisher's port closes that connection only; a
// well-behaved subscriber keeps being served throughout.
#include <catch2/catch.hpp>

#include <random>
#include <thread>

#include "auth/handshake.h"
#include "net/socket.h"
#include "peers.h"
#include "raw_peer.h"
#include "wire/frame_io.h"

using namespace weightsync;
using namespace weightsync::detail;
using namespace wstest;

namespace {

constexpr int kIoTimeoutMs = 500;
const std::string kSecret = "malformed-test-secret";

// Reads until the publisher closes the connection; fails if it stays open
// longer than `limit`. Returns the frame types seen before the close.
std::vector<MsgType> expect_closed(const Socket& s, std::chrono::milliseconds limit) {
  std::vector<MsgType> seen;
  const auto deadline = Deadline::after(limit);
  for (;;) {
    auto frame = read_frame(s, kMaxReplyPayload, deadline, deadline, "publisher");
    if (!frame.ok()) {
      INFO(frame.status().to_string());
      CHECK(frame.status().code() == ErrorCode::kConnectionLost);  // closed, not timed out
      return seen;
    }
    seen.push_back(frame->type);
  }
}

}  // namespace

TEST_CASE(
    "malformed input: garbage, truncated frames, huge lengths and out-of-range reads close only that "
    "connection",
    "[robustness]") {
  const auto layout = bytes_layout(1 << 20, 3);
  PublisherOptions options;
  options.secret = kSecret;
  options.io_timeout_ms = kIoTimeoutMs;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  const std::string address = (*publisher)->address();
  std::uint64_t version = 0;
  auto publish_next = [&] { publish_pattern(**publisher, ++version); };
  publish_next();

  auto good_options = quick_options();
  good_options.secret = kSecret;
  auto good = Subscriber::connect(address, good_options);
  REQUIRE(good.ok());
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  auto good_still_served = [&] {
    publish_next();
    auto pulled = (*good)->pull(Destination::contiguous(image->data(), image->size()));
    REQUIRE(pulled.ok());
    CHECK(pulled->version == version);
    CHECK(image_mismatch(layout, image->data(), version) == -1);
  };
  good_still_served();
  const std::uint64_t errors_before = (*publisher)->stats().protocol_errors;

  SECTION("random bytes") {
    std::mt19937 rng(7);
    std::vector<std::uint8_t> junk(4096);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    auto s = raw_connect(address);
    send_bytes(s, junk);
    expect_closed(s, std::chrono::milliseconds(3 * kIoTimeoutMs));
  }
  SECTION("a huge length field") {
    std::uint8_t header[kFrameHeaderBytes];
    encode_header(MsgType::kHello, 0xfffffff0u, header);
    auto s = raw_connect(address);
    send_bytes(s, std::vector<std::uint8_t>(header, header + sizeof(header)));
    auto t0 = std::chrono::steady_clock::now();
    expect_closed(s, std::chrono::milliseconds(3 * kIoTimeoutMs));
    CHECK(seconds_since(t0) < kIoTimeoutMs / 1000.0);  // refused at once, not after a timeout
  }
  SECTION("a truncated frame, then silence") {
    auto hello = HelloMsg{Role::kControl, 0, {}, "trunc"}.encode();
    std::uint8_t header[kFrameHeaderBytes];
    encode_header(MsgType::kHello, static_cast<std::uint32_t>(hello.size()), header);
    std::vector<std::uint8_t> partial(header, header + sizeof(header));
    partial.insert(partial.end(), hello.begin(), hello.begin() + 5);
    auto s = raw_connect(address);
    send_bytes(s, partial);
    auto t0 = std::chrono::steady_clock::now();
    expect_closed(s, std::chrono::milliseconds(4 * kIoTimeoutMs));
    CHECK(seconds_since(t0) <= 2.0 * kIoTimeoutMs / 1000.0);
  }
  SECTION("a frame truncated by a disconnect") {
    std::uint8_t header[kFrameHeaderBytes];
    encode_header(MsgType::kHello, 100, header);
    auto s = raw_connect(address);
    send_bytes(s, std::vector<std::uint8_t>(header, header + 10));
    s.close();
  }
  SECTION("out-of-range and overflowing read offsets, unknown leases, wrong message types") {
    // Authenticate for real, lease a version, then ask for bytes outside the slot.
    const auto deadline = Deadline::after(std::chrono::seconds(2));
    auto target = parse_host_port(address);
    REQUIRE(target.ok());
    auto control = raw_connect(address);
    auto session = client_handshake(control, kSecret, Role::kControl, 0, "evil", deadline);
    REQUIRE(session.ok());
    const LeaseMsg lease = raw_acquire(control, deadline);
    const std::uint64_t slot_bytes = layout.total_bytes();
    const std::vector<std::pair<std::uint64_t, std::uint64_t>> bad_ranges = {
        {slot_bytes - 10, 100}, {slot_bytes, 1}, {~0ull - 5, 10}, {0, ~0ull}};
    for (const auto& [offset, length] : bad_ranges) {
      INFO("offset " << offset << " length " << length);
      auto data = raw_connect(address);
      REQUIRE(client_handshake(data, kSecret, Role::kData, *session, "evil-data", deadline).ok());
      ReadMsg read;
      read.lease_id = lease.lease_id;
      read.ranges = {{offset, length}};
      REQUIRE(write_frame(data, MsgType::kRead, read.encode(), deadline, "p").ok());
      auto seen = expect_closed(data, std::chrono::milliseconds(3 * kIoTimeoutMs));
      CHECK(seen == std::vector<MsgType>{MsgType::kError});  // an ERROR, never DATA
    }
    auto data = raw_connect(address);
    REQUIRE(client_handshake(data, kSecret, Role::kData, *session, "evil-data", deadline).ok());
    ReadMsg unknown;
    unknown.lease_id = lease.lease_id ^ 1;
    unknown.ranges = {{0, 16}};
    REQUIRE(write_frame(data, MsgType::kRead, unknown.encode(), deadline, "p").ok());
    CHECK(expect_closed(data, std::chrono::milliseconds(3 * kIoTimeoutMs)) ==
          std::vector<MsgType>{MsgType::kError});
    // A data connection for a session that does not exist is refused.
    auto orphan = raw_connect(address);
    CHECK_FALSE(client_handshake(orphan, kSecret, Role::kData, 12345, "orphan", deadline).ok());
    // A data-plane message on the control connection closes it.
    REQUIRE(write_frame(control, MsgType::kDataEnd, DataEndMsg{0}.encode(), deadline, "p").ok());
    CHECK(expect_closed(control, std::chrono::milliseconds(3 * kIoTimeoutMs)) ==
          std::vector<MsgType>{MsgType::kError});
  }

  good_still_served();
  CHECK((*good)->status().ok());
  auto stats = (*publisher)->stats();
  CHECK(stats.protocol_errors >= errors_before);
  // The closed connections gave their leases back.
  for (int i = 0; i < 100 && (*publisher)->stats().leases_active != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK((*publisher)->stats().leases_active == 0);
}

// Issue 31: TRANSPORT_CONNECT goes to the started transport of that name
// (publisher/served_transports.h). A subscriber naming a transport that
// takes no connection, or one this publisher does not serve, or sending a
// request that does not decode, is answered with an error: nothing is made
// for it; a refusal leaves the session as it was, a request that does not
// decode closes it.
TEST_CASE(
    "transport connect: a transport that takes no connection or an unknown one is refused and the session "
    "goes on, a malformed request closes it",
    "[robustness][transports]") {
  const auto layout = bytes_layout(1 << 16, 2);
  PublisherOptions options;
  options.secret = kSecret;
  options.io_timeout_ms = kIoTimeoutMs;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  publish_pattern(**publisher, 1);
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  auto control = raw_connect((*publisher)->address());
  REQUIRE(client_handshake(control, kSecret, Role::kControl, 0, "connector", deadline).ok());
  auto ask = [&](const std::vector<std::uint8_t>& payload) {
    REQUIRE(write_frame(control, MsgType::kTransportConnect, payload, deadline, "p").ok());
    return read_expected(control, MsgType::kTransportAccept, kMaxReplyPayload, deadline, "p");
  };
  auto refused = ask(TransportConnectMsg{"tcp", {1, 2, 3}}.encode());  // tcp: served, takes no connection
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(refused.status().message(), Catch::Contains("takes no connection"));
  auto unknown = ask(TransportConnectMsg{"carrier-pigeon", std::vector<std::uint8_t>(4096, 0x5A)}.encode());
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(unknown.status().message(), Catch::Contains("not served here"));
  // The session is intact: it is still answered, and leases still work.
  REQUIRE(write_frame(control, MsgType::kGetSlotTable, {}, deadline, "p").ok());
  auto table = read_expected(control, MsgType::kSlotTable, kMaxReplyPayload, deadline, "p");
  INFO(table.status().to_string());
  REQUIRE(table.ok());
  CHECK(raw_acquire(control, deadline).version == 1);
  // A request that does not decode is a protocol error: answered, then closed.
  const std::uint64_t errors_before = (*publisher)->stats().protocol_errors;
  auto malformed = ask({0xff, 0xff, 0xff});
  REQUIRE_FALSE(malformed.ok());
  CHECK(malformed.status().code() == ErrorCode::kProtocolError);
  expect_closed(control, std::chrono::milliseconds(3 * kIoTimeoutMs));
  CHECK((*publisher)->stats().protocol_errors == errors_before + 1);
}
