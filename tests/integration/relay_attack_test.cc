// Issue 30, finding 9: a hostile upstream that sends a VERSION the relay
// cannot use (out of range, or a number it never leases) must cost the relay
// a failover, never its forwarding thread; and a relay whose forwarding did
// stop must tell its leaves instead of serving an old version as current.
// Real publishers and relays over 127.0.0.1; the hostile upstream is a real
// publisher behind a proxy that rewrites its VERSION replies (frame_proxy.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <utility>
#include <thread>
#include <vector>

#include "frame_proxy.h"
#include "patterns.h"
#include "peers.h"
#include "weightsync/weightsync.h"
#include "wire/messages.h"

using namespace weightsync;
using namespace wstest;

namespace {

const char* const kSecret = "relay-attack-secret";

SubscriberOptions attack_leaf_options() {
  SubscriberOptions o;
  o.secret = kSecret;
  o.transport = "tcp";
  o.connect_timeout_ms = 3000;
  o.io_timeout_ms = 3000;
  o.client_name = "leaf";
  return o;
}

std::unique_ptr<Publisher> make_trainer(const WeightLayout& layout) {
  PublisherOptions o;
  o.secret = kSecret;
  o.checksum = true;
  o.slots = 3;
  o.io_timeout_ms = 3000;
  auto p = Publisher::create(layout, o);
  REQUIRE(p.ok());
  return std::move(*p);
}

RelayOptions attack_relay_options(std::vector<std::string> upstreams, bool pipelined) {
  RelayOptions o;
  o.upstreams = std::move(upstreams);
  o.subscriber = attack_leaf_options();
  o.subscriber.client_name = "relay";
  o.publisher.secret = kSecret;
  o.publisher.slots = 3;
  o.publisher.io_timeout_ms = 3000;
  o.pipelined = pipelined;
  return o;
}

std::int64_t pattern_mismatch(const WeightLayout& layout, const std::vector<char>& image, std::uint64_t version) {
  for (const auto& t : layout.tensors()) {
    auto bad = find_mismatch(image.data() + t.offset, t.bytes, version, t.offset);
    if (bad >= 0) return static_cast<std::int64_t>(t.offset) + bad;
  }
  return -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Publishes versions first..last on the trainer; after each, the leaf pulls
// it through the relay. Returns each "publish -> leaf holds it" time; every
// version must arrive bit-exact.
std::vector<double> forward_times(Publisher& trainer, const std::string& relay_address, const WeightLayout& layout,
                                  std::uint64_t first, std::uint64_t last) {
  auto leaf = Subscriber::connect(relay_address, attack_leaf_options());
  INFO(leaf.status().to_string());
  REQUIRE(leaf.ok());
  std::vector<char> image(layout.total_bytes());
  std::vector<double> times;
  for (std::uint64_t v = first; v <= last; ++v) {
    const auto t0 = std::chrono::steady_clock::now();
    publish_pattern(trainer, v);
    PullOptions pull;
    pull.newer_than = v - 1;
    pull.wait = std::chrono::milliseconds(5000);
    auto pulled = (*leaf)->pull(Destination::contiguous(image.data(), image.size()), pull);
    INFO("version " << v << ": " << pulled.status().to_string());
    REQUIRE(pulled.ok());
    CHECK(pulled->version == v);
    CHECK(pulled->checksum_verified);
    CHECK(pattern_mismatch(layout, image, v) == -1);
    times.push_back(seconds_since(t0));
  }
  return times;
}

}  // namespace

TEST_CASE("relay attack: an upstream's VERSION the relay cannot use is a failover, not the end of forwarding",
          "[relay][hostile][issue30]") {
  // Out of range (version << 1 would not fit a stamp), or in range but never
  // leased (the relay reserves it, then the lease names a lower version).
  const auto lie_and_mode = GENERATE(std::make_pair(std::numeric_limits<std::uint64_t>::max(), true),
                                     std::make_pair(std::numeric_limits<std::uint64_t>::max(), false),
                                     std::make_pair(std::uint64_t{1} << 40, true),
                                     std::make_pair(std::uint64_t{1} << 40, false));
  const std::uint64_t lie = lie_and_mode.first;
  const bool pipelined = lie_and_mode.second;
  INFO("VERSION " << lie << ", pipelined " << pipelined);
  const auto layout = bytes_layout(1u << 20, 3);
  auto trainer = make_trainer(layout);
  FrameProxy liar(trainer->port(), detail::MsgType::kQueryVersion,
                  [lie](detail::MsgType type, const std::vector<std::uint8_t>& payload, const FrameProxy::ReadMore&) {
                    if (type != detail::MsgType::kVersion) return frame_bytes(type, payload);
                    return frame_bytes(type, detail::VersionMsg{lie}.encode());
                  });
  // Baseline: a relay straight from the trainer.
  std::vector<double> base;
  {
    auto relay = Relay::create(attack_relay_options({trainer->address()}, pipelined));
    REQUIRE(relay.ok());
    base = forward_times(*trainer, (*relay)->address(), layout, 1, 7);
  }
  // Attack: the liar first, the trainer second.
  auto relay = Relay::create(attack_relay_options({liar.address(), trainer->address()}, pipelined));
  INFO(relay.status().to_string());
  REQUIRE(relay.ok());
  const auto attacked = forward_times(*trainer, (*relay)->address(), layout, 8, 14);
  // A pipelined relay takes an in-range lie in its stride (the streamed lease
  // renames the slot): versions keep arriving. Once the liar has announced
  // versions it cannot lease a few times in a row, the relay fails over.
  RelayStats stats = (*relay)->stats();
  for (int i = 0; i < 100 && stats.failovers == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stats = (*relay)->stats();
  }
  INFO("error: " << stats.error << "; upstream error: " << stats.upstream_error);
  CHECK(liar.rewrites() >= 1);
  CHECK(stats.running);
  CHECK(stats.failovers >= 1);
  CHECK(stats.upstream == trainer->address());
  std::printf("relay attack (VERSION %llu, pipelined %d): forward+pull median %.2f ms without, %.2f ms with "
              "(%zu runs each)\n",
              static_cast<unsigned long long>(lie), pipelined ? 1 : 0, median(base) * 1e3, median(attacked) * 1e3,
              base.size());
  CHECK(median(attacked) <= 2 * median(base) + 0.05);
}

TEST_CASE("relay attack: a relay whose forwarding stopped tells its leaves instead of serving an old version",
          "[relay][hostile][issue30]") {
  const auto layout = bytes_layout(1u << 20, 3);
  auto trainer = make_trainer(layout);
  auto options = attack_relay_options({trainer->address()}, true);
  // An internal failure of the forwarding thread at version 2.
  options.before_commit = [](std::uint64_t version, void*, std::size_t) {
    if (version == 2) throw std::runtime_error("injected: the forwarding thread fails");
  };
  auto relay = Relay::create(options);
  REQUIRE(relay.ok());
  auto times = forward_times(*trainer, (*relay)->address(), layout, 1, 1);
  auto leaf = Subscriber::connect((*relay)->address(), attack_leaf_options());
  REQUIRE(leaf.ok());
  std::vector<char> image(layout.total_bytes());
  REQUIRE((*leaf)->pull(Destination::contiguous(image.data(), image.size())).ok());
  publish_pattern(*trainer, 2);
  // The leaf waits for something newer than version 1: it must learn, well
  // before its wait ends, that no newer version will come from this relay.
  PullOptions pull;
  pull.wait = std::chrono::milliseconds(4000);
  const auto t0 = std::chrono::steady_clock::now();
  auto next = (*leaf)->pull(Destination::contiguous(image.data(), image.size()), pull);
  const double waited = seconds_since(t0);
  INFO(next.status().to_string());
  CHECK(next.status().code() == ErrorCode::kConnectionLost);
  CHECK(next.status().message().find("forwarding") != std::string::npos);
  CHECK(waited < 2.0);
  const RelayStats stats = (*relay)->stats();
  CHECK_FALSE(stats.running);
  CHECK((*relay)->wait_for_version(1, std::chrono::milliseconds(3000)).status().code() == ErrorCode::kConnectionLost);
  CHECK(stats.error.find("injected") != std::string::npos);
  // A new leaf is told too, at once, rather than handed version 1 as current.
  auto late = Subscriber::connect((*relay)->address(), attack_leaf_options());
  if (late.ok()) {
    PullOptions newer;
    newer.newer_than = 1;
    newer.wait = std::chrono::milliseconds(4000);
    const auto t1 = std::chrono::steady_clock::now();
    auto got = (*late)->pull(Destination::contiguous(image.data(), image.size()), newer);
    CHECK(got.status().code() == ErrorCode::kConnectionLost);
    CHECK(seconds_since(t1) < 2.0);
  }
}
