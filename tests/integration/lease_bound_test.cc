// Lease bound (issue 14): under FullRingPolicy::kSkip, readers that hold
// leases and never let go (a hostile session, stopped generator processes)
// stall publishing for at most lease_timeout_ms; then their oldest leases are
// taken back, counted as expired, and honest subscribers are served the newest
// version bit-exact.
#include <catch2/catch.hpp>

#include <csignal>
#include <thread>

#include "auth/handshake.h"
#include "net/socket.h"
#include "peers.h"
#include "raw_peer.h"
#include "wire/frame_io.h"
#include "wire/messages.h"

using namespace weightsync;
using namespace weightsync::detail;
using namespace wstest;

namespace {

const std::string kSecret = "lease-bound-test-secret";
using Clock = std::chrono::steady_clock;

// Publishes `version` with its test pattern, retrying while the publisher
// answers kBusy, for at most `limit`. Returns how long it was refused (from the
// first attempt to the successful one) and how many times; fails the test if
// it never succeeded within `limit`.
struct Stall {
  double seconds = 0;
  int refusals = 0;
  Clock::time_point done;
};
Stall publish_through(Publisher& publisher, std::uint64_t version, std::chrono::milliseconds limit) {
  Stall stall;
  const auto t0 = Clock::now();
  for (int attempt = 0; attempt < 10000; ++attempt) {
    auto writer = publisher.begin_publish(version);
    if (writer.ok()) {
      for (const auto& t : publisher.layout().tensors()) {
        fill_pattern(static_cast<char*>(writer->data()) + t.offset, t.bytes, version, t.offset);
      }
      REQUIRE(writer->commit().ok());
      stall.done = Clock::now();
      stall.seconds = std::chrono::duration<double>(stall.done - t0).count();
      return stall;
    }
    INFO(writer.status().to_string());
    REQUIRE(writer.status().code() == ErrorCode::kBusy);
    ++stall.refusals;
    if (Clock::now() - t0 > limit) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL("version " << version << " was still refused after " << seconds_since(t0) << " s (" << stall.refusals
                  << " kBusy answers)");
  return stall;
}

// A control session that leases every version and never releases anything.
struct HostileSession {
  Socket control;
  std::uint64_t session = 0;
  std::vector<LeaseMsg> leases;

  // Leases the newest version; returns when the request was sent.
  Clock::time_point acquire_newest() {
    const auto deadline = Deadline::after(std::chrono::seconds(2));
    const auto sent = Clock::now();
    REQUIRE(write_frame(control, MsgType::kAcquire, AcquireMsg{0}.encode(), deadline, "publisher").ok());
    auto frame = read_expected(control, MsgType::kLease, kMaxReplyPayload, deadline, "publisher");
    INFO(frame.status().to_string());
    REQUIRE(frame.ok());
    auto lease = LeaseMsg::decode(frame->payload);
    REQUIRE(lease.ok());
    leases.push_back(*lease);
    return sent;
  }
};

HostileSession open_hostile(const std::string& address) {
  HostileSession h{raw_connect(address), 0, {}};
  auto session = client_handshake(h.control, kSecret, Role::kControl, 0, "hostile",
                                  Deadline::after(std::chrono::seconds(2)));
  INFO(session.status().to_string());
  REQUIRE(session.ok());
  h.session = *session;
  return h;
}

void pull_newest_bit_exact(Publisher& publisher, const WeightLayout& layout) {
  auto options = quick_options();
  options.secret = kSecret;
  auto honest = Subscriber::connect(publisher.address(), options);
  INFO(honest.status().to_string());
  REQUIRE(honest.ok());
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*honest)->pull(Destination::contiguous(image->data(), image->size()));
  INFO(pulled.status().to_string());
  REQUIRE(pulled.ok());
  CHECK(pulled->version == publisher.latest_version());
  CHECK(image_mismatch(layout, image->data(), pulled->version) == -1);
}

}  // namespace

TEST_CASE(
    "lease bound: a session that leases every version and never releases stalls kSkip at most the bound",
    "[lease-bound]") {
  constexpr int kLeaseTimeoutMs = 500;
  constexpr double kMargin = 0.4;  // scheduling slack on a loaded machine, seconds
  const auto layout = bytes_layout(1 << 20, 2);
  PublisherOptions options;
  options.secret = kSecret;
  options.slots = 3;
  options.full_ring_policy = FullRingPolicy::kSkip;
  options.lease_timeout_ms = kLeaseTimeoutMs;
  options.io_timeout_ms = 2000;
  auto publisher = Publisher::create(layout, options);
  INFO(publisher.status().to_string());
  REQUIRE(publisher.ok());
  Publisher& pub = **publisher;

  // The hostile session holds a lease on every slot: versions 1, 2 and 3.
  auto hostile = open_hostile(pub.address());
  std::vector<Clock::time_point> lease_sent;
  for (std::uint64_t v = 1; v <= 3; ++v) {
    publish_pattern(pub, v);
    lease_sent.push_back(hostile.acquire_newest());
    CHECK(hostile.leases.back().version == v);
  }
  CHECK(pub.stats().leases_active == 3);

  // Each further version is refused only until the oldest candidate's lease is
  // older than the bound; the session leases each new version at once, so it
  // keeps every slot leased throughout.
  int refusals = 0;
  for (std::uint64_t v = 4; v <= 7; ++v) {
    INFO("version " << v);
    Stall stall = publish_through(pub, v, std::chrono::milliseconds(kLeaseTimeoutMs * 6));
    refusals += stall.refusals;
    // The figure in docs/security.md: how long each version was held up.
    WARN("lease hog: version " << v << " stalled " << stall.seconds << " s (" << stall.refusals
                               << " kBusy) with a " << kLeaseTimeoutMs << " ms lease bound");
    CHECK(stall.seconds <= kLeaseTimeoutMs / 1000.0 + kMargin);
    if (v == 4) {
      // The slot given up was version 1's, whose lease was younger than the
      // bound when publishing started: it must not be taken before then.
      CHECK(stall.refusals > 0);
      CHECK(std::chrono::duration<double>(stall.done - lease_sent[0]).count() >= kLeaseTimeoutMs / 1000.0);
    }
    lease_sent.push_back(hostile.acquire_newest());
    CHECK(hostile.leases.back().version == v);
  }
  auto stats = pub.stats();
  CHECK(stats.versions_published == 7);
  CHECK(stats.versions_skipped == static_cast<std::uint64_t>(refusals));
  CHECK(stats.leases_expired == 4);  // one of the session's leases per version 4..7
  CHECK(stats.leases_revoked == 4);
  CHECK(stats.leases_active == 3);

  // The session's first lease was taken back: reading it is kVersionRevoked.
  auto data = raw_connect(pub.address());
  const auto deadline = Deadline::after(std::chrono::seconds(2));
  REQUIRE(client_handshake(data, kSecret, Role::kData, hostile.session, "hostile-data", deadline).ok());
  ReadMsg read;
  read.lease_id = hostile.leases[0].lease_id;
  read.ranges = {{0, 16}};
  REQUIRE(write_frame(data, MsgType::kRead, read.encode(), deadline, "publisher").ok());
  auto answer = read_expected(data, MsgType::kData, kMaxReplyPayload, deadline, "publisher");
  REQUIRE_FALSE(answer.ok());
  CHECK(answer.status().code() == ErrorCode::kVersionRevoked);

  pull_newest_bit_exact(pub, layout);
  CHECK(pub.latest_version() == 7);
}

TEST_CASE("lease bound: two SIGSTOPped subscriber processes holding leases stall kSkip at most the bound",
          "[lease-bound][process]") {
  constexpr int kLeaseTimeoutMs = 1500;
  constexpr double kMargin = 0.4;
  const auto layout = bytes_layout(1 << 20, 2);
  PublisherOptions options;
  options.secret = kSecret;
  options.slots = 3;
  options.full_ring_policy = FullRingPolicy::kSkip;
  options.lease_timeout_ms = kLeaseTimeoutMs;
  options.io_timeout_ms = 20000;  // the stopped readers' connections stay up throughout
  auto publisher = Publisher::create(layout, options);
  INFO(publisher.status().to_string());
  REQUIRE(publisher.ok());
  Publisher& pub = **publisher;

  // Two generators, each stopped in the middle of a pull of its own version.
  std::vector<ChildProcess> stopped;
  for (std::uint64_t v = 1; v <= 2; ++v) {
    publish_pattern(pub, v);
    stopped.push_back(ChildProcess::spawn({peer_path(), "subscribe", "--address", pub.address(), "--slow-ms",
                                           "20", "--transport", "tcp", "--secret", kSecret}));
    REQUIRE(stopped.back().wait_for("PROGRESS", std::chrono::seconds(20)));
    stopped.back().signal(SIGSTOP);
    CHECK(pub.stats().leases_active == v);
  }
  publish_pattern(pub, 3);  // the last free slot; now every candidate is leased

  for (std::uint64_t v = 4; v <= 8; ++v) {
    INFO("version " << v);
    Stall stall = publish_through(pub, v, std::chrono::milliseconds(kLeaseTimeoutMs * 4));
    WARN("SIGSTOPped readers: version " << v << " stalled " << stall.seconds << " s with a "
                                         << kLeaseTimeoutMs << " ms lease bound");
    CHECK(stall.seconds <= kLeaseTimeoutMs / 1000.0 + kMargin);
    if (v == 4) CHECK(stall.refusals > 0);  // the stopped readers did freeze the ring for a while
  }
  auto stats = pub.stats();
  CHECK(stats.versions_published == 8);
  CHECK(stats.leases_expired >= 1);
  CHECK(stats.leases_expired == stats.leases_revoked);
  pull_newest_bit_exact(pub, layout);

  // Let them go: each finishes its pull (or reports the revocation) and exits;
  // none may deliver wrong bytes.
  for (auto& child : stopped) {
    child.signal(SIGCONT);
    std::vector<std::string> lines;
    for (int i = 0; i < 100; ++i) {
      auto line = child.read_line(std::chrono::seconds(20));
      if (!line) break;
      lines.push_back(*line);
    }
    auto code = child.wait(std::chrono::seconds(20));
    REQUIRE(code.has_value());
    for (const auto& line : lines) {
      INFO(line);
      CHECK(line.find("are wrong") == std::string::npos);
    }
  }
}
