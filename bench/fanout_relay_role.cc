// The fanout bench's relay role (protocol in fanout.h): a weightsync::Relay
// pulling from its upstream and re-publishing on its host's address. What
// counts as "holds v" for a relay is the version it holds itself
// (Relay::wait_for_version); the bytes it forwards are checked by the leaf
// subscribers below it (every relay in a tree or chain has one).
#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "fanout.h"
#include "line_stream.h"
#include "role_loop.h"
#include "role_support.h"
#include "weightsync/relay.h"
#include "weightsync/weightsync.h"

namespace wsbench {

bool fanout_relays_built(std::string* why) {
  why->clear();
  return true;
}

namespace {

// PULL <v> <timeout_ms> -> WAITING <v>, then HELD <v> <held_ns> once the relay holds v.
std::optional<std::string> pull(RoleLoop& loop, weightsync::Relay& relay, std::istringstream& in) {
  std::uint64_t version = 0;
  long long timeout_ms = 60000;
  in >> version >> timeout_ms;
  if (!loop.send("WAITING " + std::to_string(version))) return std::nullopt;
  auto held = relay.wait_for_version(version - 1, std::chrono::milliseconds(timeout_ms));
  const std::int64_t held_ns = monotonic_ns();
  if (!held.ok()) {
    return error_line("relay waiting for version " + std::to_string(version) + ": " +
                      held.status().to_string() + " (relay: " + relay.stats().error + ")");
  }
  if (*held != version) {
    return error_line("relay holds version " + std::to_string(*held) + ", expected " +
                      std::to_string(version));
  }
  return "HELD " + std::to_string(version) + " " + std::to_string(held_ns);
}

}  // namespace

int run_fanout_relay(const std::string& upstream, const std::string& bind, const std::string& transport,
                     bool pipelined, std::uint64_t chunk_bytes) {
  wsutil::LineStream io(0, 1);
  weightsync::RelayOptions options;  // the secret (both sides): WEIGHTSYNC_SECRET
  options.upstreams = {upstream};
  options.subscriber.transport = transport;
  options.subscriber.client_name = "fanout-relay";
  options.publisher.bind_address = bind;
  options.pipelined = pipelined;
  if (chunk_bytes > 0) options.chunk_bytes = chunk_bytes;
  // The A/B switch of docs/perf/relay_cpu.md (bench/relay_cpu_ab.sh): 0 maps
  // the relay's slot pages on first use, as before RelayOptions::prefault_slots.
  if (const char* prefault = std::getenv("WSBENCH_RELAY_PREFAULT"); prefault != nullptr) {
    options.prefault_slots = std::string(prefault) != "0";
  }
  auto relay = weightsync::Relay::create(options);
  if (!relay.ok()) return startup_error(io, "relay from " + upstream + ": " + relay.status().to_string());
  RoleLoop loop(io);
  loop.on("PULL", [&](std::istringstream& in) { return pull(loop, **relay, in); });
  loop.on("CPU", [](std::istringstream&) { return cpu_line(); });
  return loop.ready_then_run((*relay)->address());
}

}  // namespace wsbench
