// RelayOptions::prefault_slots (docs/perf/relay_cpu.md): a relay maps every
// page of its ring at create(), so forwarding never takes a page fault per
// 4 KiB page; with it off the pages come on first use, as before. Measured
// on this process's own mapped shared memory (RssShmem: the relay's memfd
// slots), and forwarding from prefaulted slots stays bit-exact.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "patterns.h"
#include "peers.h"
#include "weightsync/weightsync.h"

using namespace weightsync;
using namespace wstest;

namespace {

const char* const kSecret = "relay-prefault-test-secret";
constexpr std::uint64_t kSlotBytes = 6u << 20;  // not a multiple of anything but pages
constexpr std::size_t kSlots = 3;

// This process's resident shared memory (memfd pages mapped here), in bytes.
std::uint64_t rss_shmem_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssShmem:", 0) == 0) {
      std::istringstream in(line.substr(9));
      std::uint64_t kib = 0;
      in >> kib;
      return kib << 10;
    }
  }
  FAIL("no RssShmem in /proc/self/status");
  return 0;
}

SubscriberOptions tcp_options() {
  SubscriberOptions o;
  o.secret = kSecret;
  o.transport = "tcp";
  o.connect_timeout_ms = 3000;
  o.io_timeout_ms = 3000;
  return o;
}

std::unique_ptr<Publisher> make_trainer(const WeightLayout& layout) {
  PublisherOptions o;
  o.secret = kSecret;
  o.checksum = true;
  o.slots = kSlots;
  o.io_timeout_ms = 3000;
  auto trainer = Publisher::create(layout, o);
  INFO(trainer.status().to_string());
  REQUIRE(trainer.ok());
  return std::move(*trainer);
}

// Resident shared memory that Relay::create added (the trainer's slots were
// made before and are untouched until it publishes).
std::uint64_t shmem_added_by_relay(const std::string& upstream, bool prefault,
                                   std::unique_ptr<Relay>* relay_out) {
  RelayOptions o;
  o.upstreams = {upstream};
  o.subscriber = tcp_options();
  o.publisher.secret = kSecret;
  o.publisher.slots = kSlots;
  o.publisher.io_timeout_ms = 3000;
  o.prefault_slots = prefault;
  const std::uint64_t before = rss_shmem_bytes();
  auto relay = Relay::create(o);
  INFO(relay.status().to_string());
  REQUIRE(relay.ok());
  const std::uint64_t after = rss_shmem_bytes();
  *relay_out = std::move(*relay);
  return after > before ? after - before : 0;
}

}  // namespace

TEST_CASE("relay: prefault_slots maps every page of the relay's ring at create, and forwarding stays bit-exact",
          "[relay][prefault]") {
  const WeightLayout layout = bytes_layout(kSlotBytes, 3);
  auto trainer = make_trainer(layout);
  std::unique_ptr<Relay> relay;
  const std::uint64_t added = shmem_added_by_relay(trainer->address(), true, &relay);
  INFO("RssShmem added by Relay::create: " << added << " bytes; ring: " << kSlots * layout.total_bytes());
  CHECK(added >= kSlots * layout.total_bytes());

  // Forwarding into the mapped slots: every version bit-exact at a leaf,
  // verified with the trainer's checksum, through each slot of the ring.
  auto leaf = Subscriber::connect(relay->address(), tcp_options());
  REQUIRE(leaf.ok());
  std::vector<char> image(layout.total_bytes());
  for (std::uint64_t v = 1; v <= kSlots + 1; ++v) {
    publish_pattern(*trainer, v);
    REQUIRE(relay->wait_for_version(v - 1, std::chrono::seconds(5)).ok());
    PullOptions pull;
    pull.wait = std::chrono::seconds(5);
    auto got = (*leaf)->pull(Destination::contiguous(image.data(), image.size()), pull);
    INFO(got.status().to_string());
    REQUIRE(got.ok());
    CHECK(got->version == v);
    CHECK(got->checksum_verified);
    for (const auto& t : layout.tensors()) {
      CHECK(find_mismatch(image.data() + t.offset, t.bytes, v, t.offset) == -1);
    }
  }
}

TEST_CASE("relay: with prefault_slots off the relay's ring is mapped on first use, not at create",
          "[relay][prefault]") {
  const WeightLayout layout = bytes_layout(kSlotBytes, 3);
  auto trainer = make_trainer(layout);
  std::unique_ptr<Relay> relay;
  const std::uint64_t added = shmem_added_by_relay(trainer->address(), false, &relay);
  INFO("RssShmem added by Relay::create: " << added << " bytes");
  CHECK(added < layout.total_bytes());
}
