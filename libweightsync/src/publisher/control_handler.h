// The control plane of one subscriber session, one request at a time
// (docs/protocol.md, "Control"): layout, slot table, versions, leases and
// transport connections. Every field from the wire is validated here.
//
// A QUERY_VERSION that must wait for a newer version does not block: the
// outcome says "park", the event loop (publisher/server.h) keeps the
// connection until a version lands or the wait ends, then calls
// answer_version_query(). WAIT_WATERMARK parks the same way until the
// lease's watermark reaches the asked bytes, its version commits or is
// abandoned, or the I/O timeout passes; then answer_watermark(). FETCH_DELTA
// is checked first: a chain that can never match is refused at once; one the
// delta thread has not reached yet parks (at most kMaxDeltaWaitMs) until
// DeltaStore::readiness() is no longer kLater; then answer_delta(). No
// worker ever waits for a delta, and at most DeltaStore::send_cap chains
// are sent at once (ERROR(kBusy) past it: the subscriber pulls in full). A
// session refused DeltaStore::kFreeRefusals times within a second has its
// next FETCH_DELTA held in the loop until that second ends.
//
// A retired ring (SlotRing::retire: a relay whose forwarding stopped) turns
// QUERY_VERSION, ACQUIRE and ACQUIRE_VIEW, parked ones included, into
// ERROR(kConnectionLost) with the reason; the connection stays.
//
// Threads: any thread; one request at a time per session.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "auth/integrity.h"
#include "net/socket.h"
#include "publisher/served_state.h"
#include "wire/frame.h"

namespace weightsync::detail {

struct ControlContext {
  const Socket* socket = nullptr;
  const ServedState* state = nullptr;
  std::uint64_t session = 0;
  int io_timeout_ms = 10000;
  FrameSeal* seal = nullptr;  // integrity layer: every reply sealed (null: plain frames)
};

// A FETCH_DELTA parked in the event loop.
struct ParkedDelta {
  std::uint64_t have = 0;
  std::uint64_t at_least = 0;
  std::uint64_t max_bytes = 0;
  bool hold = false;  // held for the session's refusals: answered when the wait ends
};

struct ControlOutcome {
  // Not OK: close the connection (the peer was sent ERROR where it can use one).
  Status status;
  bool bye = false;   // the peer said BYE: close quietly
  bool park = false;  // QUERY_VERSION waits for a version newer than `newer_than`
  std::uint64_t newer_than = 0;
  bool streaming = false;  // QUERY_VERSION counts in-progress versions
  std::chrono::milliseconds wait{0};
  // WAIT_WATERMARK parks instead (park is set too): lease and bytes.
  bool watermark = false;
  std::uint64_t lease_id = 0;
  std::uint64_t bytes = 0;
  // FETCH_DELTA parks instead (park is set too).
  std::optional<ParkedDelta> delta;
};

// True when a parked WAIT_WATERMARK can be answered now (reached, committed,
// revoked, unknown).
bool watermark_ready(const ServedState& state, std::uint64_t session, std::uint64_t lease_id,
                     std::uint64_t bytes);
// Replies WATERMARK, or ERROR(kVersionRevoked) (the connection stays).
Status answer_watermark(const ControlContext& ctx, std::uint64_t lease_id, std::uint64_t bytes);

ControlOutcome handle_control_request(const ControlContext& ctx, const Frame& frame);
// Replies DELTA and the chain's bytes, or ERROR (kNotReady, kBusy; the
// connection stays).
Status answer_delta(const ControlContext& ctx, const ParkedDelta& request);
// Replies VERSION to a parked QUERY_VERSION (or, if the publisher stopped
// with nothing newer, ERROR(kConnectionLost)).
Status answer_version_query(const ControlContext& ctx, std::uint64_t newer_than, bool streaming = false);
// The latest version a QUERY_VERSION reports (in-progress ones with streaming).
std::uint64_t reported_version(const ServedState& state, bool streaming);

}  // namespace weightsync::detail
