// Dead peers: a closed port, a silent server, a publisher SIGKILLed or
// SIGSTOPped mid-transfer, and a subscriber SIGKILLed mid-transfer. Survivors
// get a clear error within the configured timeout; the publisher keeps
// serving the others.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "net/socket.h"
#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {

std::uint16_t free_port() {
  auto s = detail::listen_tcp("127.0.0.1", 0);
  REQUIRE(s.ok());
  auto port = detail::local_port(*s);
  REQUIRE(port.ok());
  return *port;  // the socket closes here: nothing listens on the port
}

// Pulls from a peer publisher and sends `sig` to it as soon as bytes start to
// arrive. Returns the pull's status and the seconds from the signal to it.
std::pair<Status, double> pull_and_signal(PeerPublisher& peer, int sig, int io_timeout_ms) {
  auto sub = Subscriber::connect(peer.address, quick_options(io_timeout_ms));
  REQUIRE(sub.ok());
  auto image = HostBuffer::allocate((*sub)->layout().total_bytes());
  REQUIRE(image.ok());
  std::chrono::steady_clock::time_point signalled{};
  PullOptions pull;
  pull.on_progress = [&](std::uint64_t, std::uint64_t) {
    if (signalled == std::chrono::steady_clock::time_point{}) {
      peer.process.signal(sig);
      signalled = std::chrono::steady_clock::now();
    }
  };
  auto result = (*sub)->pull(Destination::contiguous(image->data(), image->size()), pull);
  REQUIRE(signalled != std::chrono::steady_clock::time_point{});
  const double elapsed = seconds_since(signalled);
  REQUIRE_FALSE(result.ok());
  // The error is sticky: later calls fail at once with the same error.
  auto later = (*sub)->latest_version();
  CHECK_FALSE(later.ok());
  CHECK(later.status().code() == result.status().code());
  return {result.status(), elapsed};
}

}  // namespace

TEST_CASE("dead peers: a closed port is a clear error at once", "[dead-peer]") {
  const auto t0 = std::chrono::steady_clock::now();
  auto sub = Subscriber::connect("127.0.0.1:" + std::to_string(free_port()), quick_options());
  REQUIRE_FALSE(sub.ok());
  CHECK(sub.status().code() == ErrorCode::kConnectionLost);
  CHECK(sub.status().action() == Action::kReconnect);
  CHECK_THAT(sub.status().message(), Catch::Contains("cannot connect"));
  CHECK(seconds_since(t0) < 1.0);
}

TEST_CASE("dead peers: a server that accepts but never answers times out within the connect timeout",
          "[dead-peer]") {
  auto silent = detail::listen_tcp("127.0.0.1", 0);  // the kernel accepts; nobody answers
  REQUIRE(silent.ok());
  auto port = detail::local_port(*silent);
  REQUIRE(port.ok());
  auto options = quick_options();
  options.connect_timeout_ms = 500;
  const auto t0 = std::chrono::steady_clock::now();
  auto sub = Subscriber::connect("127.0.0.1:" + std::to_string(*port), options);
  const double elapsed = seconds_since(t0);
  REQUIRE_FALSE(sub.ok());
  CHECK(sub.status().code() == ErrorCode::kTimeout);
  CHECK(elapsed >= 0.45);
  CHECK(elapsed <= 1.0);  // within 2x the timeout
}

TEST_CASE("dead peers: a publisher SIGKILLed mid-transfer is kConnectionLost within the timeout",
          "[dead-peer][process]") {
  auto peer =
      start_peer_publisher({"--size", std::to_string(128 << 20), "--tensors", "2", "--versions", "1"});
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(20)));
  constexpr int kTimeoutMs = 2000;
  auto [status, elapsed] = pull_and_signal(peer, SIGKILL, kTimeoutMs);
  INFO(status.to_string());
  CHECK(status.code() == ErrorCode::kConnectionLost);
  CHECK(status.action() == Action::kReconnect);
  CHECK(elapsed < kTimeoutMs / 1000.0);
}

TEST_CASE("dead peers: a publisher SIGSTOPped mid-transfer is kTimeout within 2x the timeout",
          "[dead-peer][process]") {
  auto peer =
      start_peer_publisher({"--size", std::to_string(128 << 20), "--tensors", "2", "--versions", "1"});
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(20)));
  constexpr int kTimeoutMs = 1000;
  auto [status, elapsed] = pull_and_signal(peer, SIGSTOP, kTimeoutMs);
  peer.process.signal(SIGCONT);
  INFO(status.to_string());
  CHECK(status.code() == ErrorCode::kTimeout);
  CHECK(elapsed >= 0.9 * kTimeoutMs / 1000.0);
  CHECK(elapsed <= 2.0 * kTimeoutMs / 1000.0);
}

TEST_CASE("dead peers: a subscriber SIGKILLed mid-transfer leaves the publisher serving others",
          "[dead-peer][process]") {
  const auto layout = bytes_layout(64 << 20, 4);
  PublisherOptions options;
  options.io_timeout_ms = 2000;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  publish_pattern(**publisher, 1);

  // A healthy subscriber connected before the failure.
  auto healthy = Subscriber::connect((*publisher)->address(), quick_options());
  REQUIRE(healthy.ok());

  auto victim = ChildProcess::spawn({peer_path(), "subscribe", "--address", (*publisher)->address(),
                                     "--slow-ms", "50", "--transport", "tcp"});
  REQUIRE(victim.wait_for("PROGRESS", std::chrono::seconds(20)));
  CHECK((*publisher)->stats().leases_active == 1);  // the victim holds a lease mid-transfer
  victim.signal(SIGKILL);
  REQUIRE(victim.wait(std::chrono::seconds(5)) == 128 + SIGKILL);

  // The publisher notices, closes both of its connections and frees the lease.
  const auto t0 = std::chrono::steady_clock::now();
  while (((*publisher)->stats().leases_active != 0 || (*publisher)->stats().connections_active != 2) &&
         seconds_since(t0) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK((*publisher)->stats().leases_active == 0);
  CHECK((*publisher)->stats().connections_active == 2);  // only the healthy subscriber's two
  CHECK(seconds_since(t0) < options.io_timeout_ms.value() / 1000.0);

  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*healthy)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 1);
  CHECK(image_mismatch(layout, image->data(), 1) == -1);
  auto newcomer = Subscriber::connect((*publisher)->address(), quick_options());
  REQUIRE(newcomer.ok());
  auto pulled_again = (*newcomer)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled_again.ok());
  CHECK(image_mismatch(layout, image->data(), 1) == -1);
}
