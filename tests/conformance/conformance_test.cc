// The conformance suite: the same guarantees checked on every data transport
// (bit-exact pulls, no torn reads, dead and stalled publishers, dead
// subscribers, checksum mismatches, no registration on the pull path). ctest runs each case once per
// transport as "conformance <transport>: <case>"; see tests/CMakeLists.txt.
#include <catch2/catch.hpp>

#include <signal.h>

#include <thread>

#include "conformance.h"
#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {

SubscriberOptions options_for_transport(int io_timeout_ms = 5000) {
  return quick_options(io_timeout_ms, conformance_transport());
}

std::unique_ptr<Subscriber> connect_checked(const std::string& address, const SubscriberOptions& options) {
  auto sub = Subscriber::connect(address, options);
  INFO(sub.status().to_string());
  REQUIRE(sub.ok());
  REQUIRE((*sub)->transport() == conformance_transport());
  return std::move(*sub);
}

// Pulls from a peer publisher and sends `sig` to it as soon as bytes arrive.
// A one-sided transport may finish the pull without the publisher's help;
// then the pull must be bit-exact, and the next call must fail instead.
struct SignalledPull {
  Result<PullResult> pull{Status(ErrorCode::kInternal, "not run")};
  Status next_call;
  double pull_seconds_after_signal = 0;
  double next_call_seconds = 0;
};

SignalledPull pull_and_signal(PeerPublisher& peer, int sig, int io_timeout_ms) {
  auto sub = connect_checked(peer.address, options_for_transport(io_timeout_ms));
  auto image = HostBuffer::allocate(sub->layout().total_bytes());
  REQUIRE(image.ok());
  std::chrono::steady_clock::time_point signalled{};
  PullOptions pull;
  pull.on_progress = [&](std::uint64_t, std::uint64_t) {
    if (signalled == std::chrono::steady_clock::time_point{}) {
      peer.process.signal(sig);
      signalled = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the signal land
    }
  };
  SignalledPull out;
  out.pull = sub->pull(Destination::contiguous(image->data(), image->size()), pull);
  REQUIRE(signalled != std::chrono::steady_clock::time_point{});
  out.pull_seconds_after_signal = seconds_since(signalled);
  if (out.pull.ok()) CHECK(image_mismatch(sub->layout(), image->data(), out.pull->version) == -1);
  const auto t0 = std::chrono::steady_clock::now();
  auto next = sub->latest_version();
  out.next_call = next.ok() ? Status() : next.status();
  out.next_call_seconds = seconds_since(t0);
  return out;
}

}  // namespace

TEST_CASE("bit-exact pulls at several sizes, contiguous and scatter", "[bitexact]") {
  const std::uint64_t size = GENERATE(1ull, (1ull << 20) + 13, 64ull << 20);
  const int tensors = size < 16 ? 1 : 5;
  INFO("size " << size);
  auto peer = start_peer_publisher({"--size", std::to_string(size), "--tensors", std::to_string(tensors),
                                    "--slots", "3", "--versions", "3", "--step"});
  auto sub = connect_checked(peer.address, options_for_transport());
  const WeightLayout& layout = sub->layout();
  auto region = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(region.ok());
  auto scatter_buffers = allocate_scatter(layout);
  const auto& buffers = scatter_buffers.buffers;
  const auto& entries = scatter_buffers.entries;
  for (std::uint64_t version = 1; version <= 3; ++version) {
    peer.process.write_line("next");
    REQUIRE(peer.process.wait_for("PUBLISHED " + std::to_string(version), std::chrono::seconds(30)));
    const bool scatter = version == 2;
    auto pulled = sub->pull(scatter ? Destination::scatter(entries)
                                    : Destination::contiguous(region->data(), region->size()));
    REQUIRE(pulled.ok());
    CHECK(pulled->version == version);
    CHECK(pulled->bytes == size);
    if (scatter) {
      for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
        CHECK(find_mismatch(buffers[i].data(), layout.tensors()[i].bytes, version,
                            layout.tensors()[i].offset) == -1);
      }
    } else {
      CHECK(image_mismatch(layout, region->data(), version) == -1);
    }
  }
}

TEST_CASE("torn-read stress: 2-slot ring, in-place writer, slow reader, 1000 pulls", "[torn]") {
  auto peer = start_peer_publisher(
      {"--size", std::to_string(1 << 20), "--tensors", "4", "--slots", "2", "--forever"});
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(10)));
  auto options = options_for_transport();
  options.max_retries = 100000;
  auto sub = connect_checked(peer.address, options);
  auto image = HostBuffer::allocate(sub->layout().total_bytes());
  REQUIRE(image.ok());
  std::uint64_t retries = 0, mixed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    int slow_chunks = 3;
    PullOptions pull;
    pull.newer_than = 0;
    pull.on_progress = [&](std::uint64_t, std::uint64_t) {
      if (slow_chunks-- > 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    };
    auto pulled = sub->pull(Destination::contiguous(image->data(), image->size()), pull);
    REQUIRE(pulled.ok());
    retries += pulled->retries;
    if (image_mismatch(sub->layout(), image->data(), pulled->version) != -1) ++mixed;
  }
  WARN(conformance_transport() << " torn-read stress: 1000 pulls in " << seconds_since(start) << " s, "
                               << retries << " torn or revoked reads detected and retried, " << mixed
                               << " undetected");
  CHECK(mixed == 0);
  CHECK(retries > 0);
}

TEST_CASE("a publisher SIGKILLed mid-pull is an error within the timeout", "[dead-publisher]") {
  auto peer =
      start_peer_publisher({"--size", std::to_string(128 << 20), "--tensors", "2", "--versions", "1"});
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(20)));
  constexpr int kTimeoutMs = 2000;
  auto r = pull_and_signal(peer, SIGKILL, kTimeoutMs);
  if (!r.pull.ok()) {
    CHECK(r.pull.status().code() == ErrorCode::kConnectionLost);
    CHECK(r.pull_seconds_after_signal < kTimeoutMs / 1000.0);
  }
  REQUIRE_FALSE(r.next_call.ok());
  CHECK(r.next_call.code() == ErrorCode::kConnectionLost);
  CHECK(r.next_call_seconds < kTimeoutMs / 1000.0);
}

TEST_CASE("a publisher SIGSTOPped mid-pull is a timeout within 2x the timeout", "[stalled-publisher]") {
  auto peer =
      start_peer_publisher({"--size", std::to_string(128 << 20), "--tensors", "2", "--versions", "1"});
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(20)));
  constexpr int kTimeoutMs = 1000;
  auto r = pull_and_signal(peer, SIGSTOP, kTimeoutMs);
  peer.process.signal(SIGCONT);
  double waited = r.next_call_seconds;
  if (!r.pull.ok()) {
    CHECK(r.pull.status().code() == ErrorCode::kTimeout);
    waited = r.pull_seconds_after_signal;
  }
  REQUIRE_FALSE(r.next_call.ok());
  CHECK(r.next_call.code() == ErrorCode::kTimeout);
  CHECK(waited >= 0.9 * kTimeoutMs / 1000.0);
  CHECK(waited <= 2.0 * kTimeoutMs / 1000.0);
}

TEST_CASE("a subscriber SIGKILLed mid-pull leaves the publisher serving others", "[dead-subscriber]") {
  const auto layout = bytes_layout(64 << 20, 4);
  PublisherOptions options;
  options.io_timeout_ms = 2000;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  publish_pattern(**publisher, 1);
  auto healthy = connect_checked((*publisher)->address(), options_for_transport());
  auto victim = ChildProcess::spawn({peer_path(), "subscribe", "--address", (*publisher)->address(),
                                     "--slow-ms", "50", "--transport", conformance_transport()});
  REQUIRE(victim.wait_for("PROGRESS", std::chrono::seconds(20)));
  CHECK((*publisher)->stats().leases_active == 1);
  victim.signal(SIGKILL);
  REQUIRE(victim.wait(std::chrono::seconds(5)) == 128 + SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  while ((*publisher)->stats().leases_active != 0 && seconds_since(t0) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK((*publisher)->stats().leases_active == 0);
  CHECK(seconds_since(t0) < 2.0);
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  publish_pattern(**publisher, 2);
  auto pulled = healthy->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 2);
  CHECK(image_mismatch(layout, image->data(), 2) == -1);
}

TEST_CASE("a checksum mismatch is detected, and never delivered", "[checksum]") {
  const auto layout = bytes_layout(4 << 20, 3);
  PublisherOptions options;
  options.checksum = true;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  // A caller bug: writing through a SlotWriter's pointer after commit changes
  // the committed version's bytes without touching its stamp. Only the
  // checksum can tell, whatever the transport.
  auto writer = (*publisher)->begin_publish(1);
  REQUIRE(writer.ok());
  for (const auto& t : layout.tensors()) {
    fill_pattern(static_cast<char*>(writer->data()) + t.offset, t.bytes, 1, t.offset);
  }
  auto* stale = static_cast<unsigned char*>(writer->data());
  REQUIRE(writer->commit().ok());
  stale[layout.tensors()[1].offset + 12345] ^= 0x01;

  auto sub_options = options_for_transport();
  sub_options.max_retries = 2;
  auto sub = connect_checked((*publisher)->address(), sub_options);
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  auto failed = sub->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == ErrorCode::kChecksumMismatch);
  CHECK(sub->held_version() == 0);  // nothing was delivered
  CHECK(sub->status().ok());

  publish_pattern(**publisher, 2);
  auto pulled = sub->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 2);
  CHECK(pulled->checksum_verified);
  CHECK(image_mismatch(layout, image->data(), 2) == -1);
}

TEST_CASE("no memory is registered on the pull path", "[registrations]") {
  const auto layout = bytes_layout(8 << 20, 4);
  auto publisher = Publisher::create(layout);
  REQUIRE(publisher.ok());
  auto sub = connect_checked((*publisher)->address(), options_for_transport());
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  auto scatter_buffers = allocate_scatter(layout);
  const auto& buffers = scatter_buffers.buffers;
  const auto& entries = scatter_buffers.entries;
  std::uint64_t after_first = 0;
  for (std::uint64_t version = 1; version <= 6; ++version) {
    publish_pattern(**publisher, version);
    auto pulled = sub->pull(version % 2 ? Destination::contiguous(image->data(), image->size())
                                        : Destination::scatter(entries));
    REQUIRE(pulled.ok());
    if (version % 2) CHECK(image_mismatch(layout, image->data(), version) == -1);
    if (version == 2) after_first = sub->stats().registrations;  // both destinations seen once
  }
  // Destinations are registered at most once, on first use; the steady pull
  // loop registers nothing.
  CHECK(sub->stats().registrations == after_first);
  CHECK(sub->stats().pulls == 6);
  WARN(conformance_transport() << ": " << after_first << " registrations for 2 destinations, none after");
}
