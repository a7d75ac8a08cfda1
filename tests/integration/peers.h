// Helpers for the multi-process tests: start ws_test_peer as a publisher and
// check a pulled image against the test pattern.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "patterns.h"
#include "weightsync/weightsync.h"

namespace wstest {

using wsutil::ChildProcess;

inline std::string peer_path() {
  return WS_TEST_PEER_PATH;
}

struct PeerPublisher {
  ChildProcess process;
  std::string address;
};

// Where a peer publisher runs: `prefix` is a command that runs its argument
// command elsewhere and must exec it, so that the child's pid (signals) is the
// peer's, e.g. {"scripts/testbed.sh", "exec", "BED", "0"} or
// {"ip", "netns", "exec", "BED-h0"}; `bind` its --bind address ("" : loopback).
struct PeerHost {
  std::vector<std::string> prefix;
  std::string bind;
};

// From WS_PEER_PREFIX (words separated by spaces) and WS_PEER_BIND; both unset:
// this host, loopback. tests/testbed/cross_host_conformance.sh sets them.
inline PeerHost peer_host_from_env() {
  PeerHost host;
  if (const char* prefix = std::getenv("WS_PEER_PREFIX")) {
    std::istringstream words(prefix);
    for (std::string w; words >> w;) host.prefix.push_back(w);
  }
  if (const char* bind = std::getenv("WS_PEER_BIND")) host.bind = bind;
  return host;
}

// Starts `[host.prefix...] ws_test_peer publish <args> [--bind host.bind]` and
// waits for its address.
inline PeerPublisher start_peer_publisher(std::vector<std::string> args, const PeerHost& host = {}) {
  args.insert(args.begin(), {peer_path(), "publish"});
  args.insert(args.begin(), host.prefix.begin(), host.prefix.end());
  if (!host.bind.empty()) args.insert(args.end(), {"--bind", host.bind});
  auto child = ChildProcess::spawn(args);
  auto address = child.wait_for("ADDRESS ", std::chrono::seconds(20));
  REQUIRE(address.has_value());
  return PeerPublisher{std::move(child), *address};
}

// Offset of the first wrong byte in a contiguous image of `version`, or -1.
inline std::int64_t image_mismatch(const weightsync::WeightLayout& layout, const void* image,
                                   std::uint64_t version) {
  for (const auto& t : layout.tensors()) {
    auto bad = find_mismatch(static_cast<const char*>(image) + t.offset, t.bytes, version, t.offset);
    if (bad >= 0) return static_cast<std::int64_t>(t.offset) + bad;
  }
  return -1;
}

// One buffer per tensor of `layout`, and the scatter entries pointing at them.
struct ScatterBuffers {
  std::vector<weightsync::HostBuffer> buffers;
  std::vector<weightsync::ScatterEntry> entries;
};

inline ScatterBuffers allocate_scatter(const weightsync::WeightLayout& layout) {
  ScatterBuffers out;
  for (const auto& t : layout.tensors()) {
    auto b = weightsync::HostBuffer::allocate(t.bytes);
    REQUIRE(b.ok());
    out.entries.push_back({t.spec.name, b->data(), t.bytes});
    out.buffers.push_back(std::move(*b));
  }
  return out;
}

// Publishes `version` in place: each tensor gets the version's test pattern.
inline void publish_pattern(weightsync::Publisher& publisher, std::uint64_t version) {
  auto writer = publisher.begin_publish(version);
  REQUIRE(writer.ok());
  for (const auto& t : publisher.layout().tensors()) {
    fill_pattern(static_cast<char*>(writer->data()) + t.offset, t.bytes, version, t.offset);
  }
  REQUIRE(writer->commit().ok());
}

// Options for tests: short timeouts, and a fixed transport (tcp unless said).
inline weightsync::SubscriberOptions quick_options(int io_timeout_ms = 5000,
                                                   const std::string& transport = "tcp") {
  weightsync::SubscriberOptions o;
  o.transport = transport;
  o.connect_timeout_ms = 5000;
  o.io_timeout_ms = io_timeout_ms;
  o.client_name = "test";
  return o;
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace wstest
