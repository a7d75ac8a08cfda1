// PublisherServer's per-connection state and the constants its event loop
// and workers share (publisher/server.h). Internal to server*.cc.
//
// A Connection is owned by the event loop (PublisherServer::connections_);
// while `busy`, one worker has its socket and the loop touches nothing but
// the flags it set before handing it over. A Completion is what a worker
// hands back (under completions_mu_).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "auth/integrity.h"
#include "auth/server_handshake.h"
#include "net/peer_identity.h"
#include "publisher/control_handler.h"
#include "publisher/server.h"
#include "wire/frame_assembler.h"

namespace weightsync::detail {
namespace server_internal {

constexpr const char* kPeer = "subscriber";
// epoll tags below the first connection id.
constexpr std::uint64_t kListenerTag = 1;
constexpr std::uint64_t kLocalListenerTag = 2;
constexpr std::uint64_t kWakeTag = 3;
// Named streams' local listeners: this bit set, then a counter.
constexpr std::uint64_t kStreamListenerTagBit = std::uint64_t{1} << 63;
// Connections accepted per listener per loop turn: a flood of new connections
// cannot starve the handshakes already under way.
constexpr int kAcceptsPerTurn = 8;
constexpr int kSweepMillis = 50;
// Pre-authentication log lines per second; the rest are counted and summed up.
constexpr std::uint32_t kPreAuthLogsPerSecond = 10;

inline std::uint64_t now_millis() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// The per-address key of the handshake budget: empty (no per-address cap)
// for peers on this host, who all share one address.
inline std::string budget_address(const std::string& peer, bool local) {
  if (local) return "";
  auto host_port = parse_host_port(peer);
  if (!host_port.ok() || is_loopback_host(host_port->host)) return "";
  return host_port->host;
}

}  // namespace server_internal

struct PublisherServer::Connection {
  enum class Phase { kHandshake, kControl, kData, kLocal };

  std::uint64_t id = 0;
  Socket socket;
  std::string peer;  // printable
  bool local = false;
  Phase phase = Phase::kHandshake;
  HandshakeResponder handshake;
  FrameAssembler in;
  std::uint64_t session = 0;  // the control session this connection belongs to
  bool owns_session = false;  // a control connection: its close ends the session
  bool busy = false;          // a worker has the socket
  bool parked = false;        // a QUERY_VERSION or WAIT_WATERMARK waits
  std::uint64_t park_newer_than = 0;
  bool park_streaming = false;  // QUERY_VERSION: in-progress versions count
  bool park_watermark = false;  // WAIT_WATERMARK (else QUERY_VERSION)
  std::uint64_t park_lease = 0;
  std::uint64_t park_bytes = 0;
  std::optional<ParkedDelta> park_delta;  // a parked FETCH_DELTA
  Clock::time_point park_until{};
  Clock::time_point handshake_until{};
  Clock::time_point last_activity{};
  Clock::time_point partial_since{};  // first byte of an incomplete frame
  bool has_partial = false;
  // Integrity layer (control sessions that asked for it): seals and opens
  // every frame after WELCOME. Used by whoever owns the socket at the time.
  std::unique_ptr<FrameSeal> seal;
  // The stream this connection's session serves (null: none yet); set on
  // authenticating, or by SELECT_STREAM (the session's first request).
  std::shared_ptr<const ServedStream> stream;
  bool served_request = false;  // a control request was served (SELECT_STREAM comes first or never)

  Connection(std::string secret, bool integrity, bool encryption)
      : handshake(std::move(secret), integrity, encryption) {}
};

struct PublisherServer::Completion {
  std::uint64_t id = 0;
  bool close = false;
  bool park = false;
  std::uint64_t newer_than = 0;
  bool streaming = false;
  bool watermark = false;
  std::uint64_t lease_id = 0;
  std::uint64_t bytes = 0;
  std::optional<ParkedDelta> delta;
  std::chrono::milliseconds wait{0};
  std::shared_ptr<const ServedStream> selected;  // SELECT_STREAM: the session's stream now
};

}  // namespace weightsync::detail
