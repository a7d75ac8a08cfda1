// The control-plane requests of one subscriber session.
#include "publisher/control_handler.h"

#include <algorithm>
#include <optional>

#include "common/log.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {

constexpr const char* kPeer = "subscriber";
constexpr std::uint32_t kMaxWaitMs = 10 * 60 * 1000;

Deadline io_deadline(const ControlContext& ctx) {
  return Deadline::after(std::chrono::milliseconds(ctx.io_timeout_ms));
}

Status reply(const ControlContext& ctx, MsgType type, const std::vector<std::uint8_t>& payload) {
  return write_sealed(*ctx.socket, ctx.seal, type, payload, io_deadline(ctx), kPeer);
}

// An answer the subscriber can act on (nothing newer yet, too many leases, a
// transport that cannot connect): not a broken connection.
Status reply_refusal(const ControlContext& ctx, const Status& why) {
  return reply(ctx, MsgType::kError, ErrorMsg{why.code(), why.message()}.encode());
}

// After a reply: the connection stays if it was sent.
ControlOutcome sent(Status status) {
  ControlOutcome out;
  out.status = std::move(status);
  return out;
}

ControlOutcome protocol_error(const ControlContext& ctx, const std::string& why) {
  return sent(reply_error_sealed(*ctx.socket, ctx.seal, ErrorCode::kProtocolError, why, io_deadline(ctx), kPeer));
}

// A relay whose forwarding stopped (SlotRing::retire): kConnectionLost, so
// the subscriber looks elsewhere rather than take the held version as current.
std::optional<Status> retired(const ControlContext& ctx) {
  auto why = ctx.state->ring->retired();
  if (!why) return std::nullopt;
  return reply_refusal(ctx, Status(ErrorCode::kConnectionLost, *why));
}

ControlOutcome query_version(const ControlContext& ctx, const Frame& frame) {
  auto query = QueryVersionMsg::decode(frame.payload);
  if (!query.ok()) return protocol_error(ctx, query.status().message());
  if (auto refused = retired(ctx)) return sent(*refused);
  const std::uint64_t latest = reported_version(*ctx.state, query->accept_streaming);
  if (query->wait_ms > 0 && latest <= query->newer_than) {
    ControlOutcome out;
    out.park = true;
    out.newer_than = query->newer_than;
    out.streaming = query->accept_streaming;
    out.wait = std::chrono::milliseconds(std::min(query->wait_ms, kMaxWaitMs));
    return out;
  }
  return sent(reply(ctx, MsgType::kVersion, VersionMsg{latest}.encode()));
}

ControlOutcome wait_watermark(const ControlContext& ctx, const Frame& frame) {
  auto request = WaitWatermarkMsg::decode(frame.payload);
  if (!request.ok()) return protocol_error(ctx, request.status().message());
  if (watermark_ready(*ctx.state, ctx.session, request->lease_id, request->bytes)) {
    return sent(answer_watermark(ctx, request->lease_id, request->bytes));
  }
  ControlOutcome out;
  out.park = true;
  out.watermark = true;
  out.lease_id = request->lease_id;
  out.bytes = request->bytes;
  // Bounded by the publisher's I/O timeout whatever the peer asks.
  out.wait = std::chrono::milliseconds(std::min<std::uint32_t>(request->wait_ms, static_cast<std::uint32_t>(ctx.io_timeout_ms)));
  return out;
}

ControlOutcome acquire(const ControlContext& ctx, const Frame& frame) {
  auto request = AcquireMsg::decode(frame.payload);
  if (!request.ok()) return protocol_error(ctx, request.status().message());
  if (auto refused = retired(ctx)) return sent(*refused);
  auto grant = ctx.state->ring->acquire(ctx.session, request->newer_than, request->accept_streaming);
  if (!grant.ok()) return sent(reply_refusal(ctx, grant.status()));
  LeaseMsg lease{grant->lease_id, grant->version,      grant->slot,
                 grant->stamp,    grant->has_checksum, grant->checksum};
  return sent(reply(ctx, MsgType::kLease, lease.encode()));
}

// A view's range list (docs/protocol.md, "Views").
ControlOutcome register_view(const ControlContext& ctx, const Frame& frame) {
  auto request = RegisterViewMsg::decode(frame.payload);
  if (!request.ok()) return protocol_error(ctx, request.status().message());
  if (ctx.state->views == nullptr) return sent(reply_refusal(ctx, Status(ErrorCode::kInvalidConfig, "no views here")));
  auto view = ctx.state->views->add(ctx.session, *request);
  if (!view.ok()) return sent(reply_refusal(ctx, view.status()));
  return sent(reply(ctx, MsgType::kView, view->encode()));
}

// ACQUIRE_VIEW: an exact version and/or a view's checksum in the lease.
ControlOutcome acquire_view(const ControlContext& ctx, const Frame& frame) {
  auto request = AcquireViewMsg::decode(frame.payload);
  if (!request.ok()) return protocol_error(ctx, request.status().message());
  if (auto refused = retired(ctx)) return sent(*refused);
  SlotRing& ring = *ctx.state->ring;
  auto grant = request->exact ? ring.acquire_version(ctx.session, request->version)
                              : ring.acquire(ctx.session, request->version);
  if (!grant.ok()) return sent(reply_refusal(ctx, grant.status()));
  LeaseMsg lease{grant->lease_id, grant->version,      grant->slot,
                 grant->stamp,    grant->has_checksum, grant->checksum};
  if (request->view_id != 0) {
    // The view's checksum replaces the whole version's (none without checksums).
    lease.has_checksum = false;
    lease.checksum = 0;
    if (ctx.state->checksums && ctx.state->views != nullptr) {
      auto sum = ctx.state->views->checksum(ctx.session, request->view_id, ring, grant->slot, grant->stamp);
      if (!sum.ok()) {
        ring.release(ctx.session, grant->lease_id);
        return sent(reply_refusal(ctx, sum.status()));
      }
      lease.has_checksum = true;
      lease.checksum = *sum;
    }
  }
  return sent(reply(ctx, MsgType::kLease, lease.encode()));
}

// FETCH_SIGNATURE: answered at once, from memory (never holds a worker).
ControlOutcome fetch_signature(const ControlContext& ctx, const Frame& frame) {
  auto request = FetchSignatureMsg::decode(frame.payload);
  if (!request.ok()) return protocol_error(ctx, request.status().message());
  if (ctx.state->signatures == nullptr) {
    return sent(reply_refusal(ctx, Status(ErrorCode::kInvalidConfig, "this publisher serves no signatures")));
  }
  auto block = ctx.state->signatures->lookup(request->version);
  if (!block.ok()) return sent(reply_refusal(ctx, block.status()));
  return sent(reply(ctx, MsgType::kSignature, **block));
}

// FETCH_DELTA: the chain of deltas, its compressed bytes after the frame.
// Sending is bounded by the I/O timeout per stall, as DATA is.
ControlOutcome fetch_delta(const ControlContext& ctx, const Frame& frame) {
  auto request = FetchDeltaMsg::decode(frame.payload);
  if (!request.ok()) return protocol_error(ctx, request.status().message());
  if (ctx.state->deltas == nullptr) {
    return sent(reply_refusal(ctx, Status(ErrorCode::kNotReady, "this publisher computes no deltas")));
  }
  DeltaStore& deltas = *ctx.state->deltas;
  ParkedDelta asked{request->have, request->at_least, request->max_bytes};
  if (const auto hold = deltas.refusal_hold(ctx.session); hold.count() > 0) {
    // Refused often this second: this one waits in the loop, costing nothing.
    ControlOutcome out;
    out.park = true;
    asked.hold = true;
    out.delta = asked;
    out.wait = hold;
    return out;
  }
  // Waiting is only for the delta thread to encode a committed version: a
  // version not yet committed is refused at once (no worker held for it).
  if (request->at_least > ctx.state->ring->latest_version()) {
    deltas.note_refusal(ctx.session);
    return sent(reply_refusal(ctx, Status(ErrorCode::kNotReady, "version " + std::to_string(request->at_least) +
                                                                    " is not committed")));
  }
  switch (deltas.readiness(asked.have, asked.at_least)) {
    case DeltaReadiness::kNever:
      deltas.note_refusal(ctx.session);
      return sent(reply_refusal(ctx, Status(ErrorCode::kNotReady, "no delta chain from version " +
                                                                      std::to_string(asked.have) + " can reach version " +
                                                                      std::to_string(asked.at_least) + " here")));
    case DeltaReadiness::kLater:
      if (request->wait_ms > 0) {
        // Waiting is the event loop's, never a worker's.
        ControlOutcome out;
        out.park = true;
        out.delta = asked;
        out.wait = std::chrono::milliseconds(std::min(request->wait_ms, kMaxDeltaWaitMs));
        return out;
      }
      break;
    case DeltaReadiness::kNow: break;
  }
  return sent(answer_delta(ctx, asked));
}

}  // namespace

Status answer_delta(const ControlContext& ctx, const ParkedDelta& request) {
  DeltaStore& deltas = *ctx.state->deltas;
  auto chain = deltas.chain(request.have, request.at_least, request.max_bytes, std::chrono::milliseconds(0));
  if (!chain.ok()) {
    deltas.note_refusal(ctx.session);
    return reply_refusal(ctx, chain.status());
  }
  // A peer that does not read holds this worker up to the I/O timeout per stall.
  if (!deltas.try_begin_send()) {
    return reply_refusal(ctx, Status(ErrorCode::kBusy, "too many delta chains are being sent at once; pull in full"));
  }
  struct EndSend {
    DeltaStore& store;
    ~EndSend() { store.end_send(); }
  } end_send{deltas};
  DeltaMsg header;
  header.element_bytes = static_cast<std::uint8_t>(deltas.element_bytes());
  std::vector<iovec> iov;
  for (const DeltaLink& link : *chain) {
    header.links.push_back(DeltaLinkHeader{link.from, link.to, link.checksum, link.compressed->size()});
    iov.push_back(iovec{const_cast<std::uint8_t*>(link.compressed->data()), link.compressed->size()});
  }
  if (Status s = reply(ctx, MsgType::kDelta, header.encode()); !s.ok()) return s;
  return send_iov(*ctx.socket, iov.data(), iov.size(), Deadline::never(), kPeer, ctx.io_timeout_ms);
}

namespace {

ControlOutcome transport_connect(const ControlContext& ctx, const Frame& frame) {
  auto request = TransportConnectMsg::decode(frame.payload);
  if (!request.ok()) return protocol_error(ctx, request.status().message());
  auto accepted = ctx.state->transports->connect(request->transport, ctx.session, request->blob);
  // A transport that cannot connect is an answer (the subscriber falls back).
  if (!accepted.ok()) return sent(reply_refusal(ctx, accepted.status()));
  return sent(
      reply(ctx, MsgType::kTransportAccept, TransportConnectMsg{request->transport, *accepted}.encode()));
}

}  // namespace

ControlOutcome handle_control_request(const ControlContext& ctx, const Frame& frame) {
  SlotRing& ring = *ctx.state->ring;
  WS_LOG(LogLevel::kTrace, "publisher: session {:x}: {}", ctx.session, to_string(frame.type));
  switch (frame.type) {
    case MsgType::kGetLayout:
      if (!frame.payload.empty()) return protocol_error(ctx, "GET_LAYOUT has a payload");
      return sent(reply(ctx, MsgType::kLayout, LayoutMsg{ctx.state->layout->serialize()}.encode()));
    case MsgType::kGetSlotTable: {
      if (!frame.payload.empty()) return protocol_error(ctx, "GET_SLOT_TABLE has a payload");
      SlotTableMsg table;
      table.slot_count = static_cast<std::uint32_t>(ring.slot_count());
      table.slot_bytes = ring.slot_bytes();
      table.checksums = ctx.state->checksums;
      table.transports = ctx.state->transports->offers();
      if (ctx.state->deltas != nullptr) {
        const auto history = static_cast<std::uint32_t>(ctx.state->deltas->history());
        table.features |= kFeatureDeltas | (std::min(history, kFeatureDeltaHistoryMask) << kFeatureDeltaHistoryShift);
      }
      if (ctx.state->signatures != nullptr && ctx.state->signatures->offered()) table.features |= kFeatureSignatures;
      return sent(reply(ctx, MsgType::kSlotTable, table.encode()));
    }
    case MsgType::kQueryVersion: return query_version(ctx, frame);
    case MsgType::kAcquire: return acquire(ctx, frame);
    case MsgType::kRegisterView: return register_view(ctx, frame);
    case MsgType::kAcquireView: return acquire_view(ctx, frame);
    case MsgType::kWaitWatermark: return wait_watermark(ctx, frame);
    case MsgType::kFetchDelta: return fetch_delta(ctx, frame);
    case MsgType::kFetchSignature: return fetch_signature(ctx, frame);
    case MsgType::kRelease: {
      auto release = ReleaseMsg::decode(frame.payload);
      if (!release.ok()) return protocol_error(ctx, release.status().message());
      ring.release(ctx.session, release->lease_id);  // no reply by design
      return ControlOutcome{};
    }
    case MsgType::kTransportConnect: return transport_connect(ctx, frame);
    case MsgType::kBye: {
      ControlOutcome out;
      out.bye = true;
      return out;
    }
    default:
      return protocol_error(ctx,
                            std::string("unexpected ") + to_string(frame.type) + " on a control connection");
  }
}

std::uint64_t reported_version(const ServedState& state, bool streaming) {
  return streaming ? state.ring->latest_streamable() : state.ring->latest_version();
}

bool watermark_ready(const ServedState& state, std::uint64_t session, std::uint64_t lease_id,
                     std::uint64_t bytes) {
  auto st = state.ring->stream_state(session, lease_id);
  return !st.ok() || st->committed || st->watermark >= bytes;
}

Status answer_watermark(const ControlContext& ctx, std::uint64_t lease_id, std::uint64_t /*bytes*/) {
  auto st = ctx.state->ring->stream_state(ctx.session, lease_id);
  if (!st.ok()) {
    if (st.status().code() == ErrorCode::kVersionRevoked) return reply_refusal(ctx, st.status());
    return reply_error_sealed(*ctx.socket, ctx.seal, ErrorCode::kInvalidArgument,
                              "WAIT_WATERMARK names a lease this session does not hold", io_deadline(ctx), kPeer);
  }
  // Answered with the state as it is: reached, committed, or (after the
  // bounded wait) neither, which the subscriber counts as a stall.
  return reply(ctx, MsgType::kWatermark,
               WatermarkMsg{st->watermark, st->committed, st->has_checksum, st->checksum}.encode());
}

Status answer_version_query(const ControlContext& ctx, std::uint64_t newer_than, bool streaming) {
  const SlotRing& ring = *ctx.state->ring;
  if (auto refused = retired(ctx)) return *refused;
  const std::uint64_t latest = reported_version(*ctx.state, streaming);
  if (latest <= newer_than && ring.stopped()) {
    return reply_error_sealed(*ctx.socket, ctx.seal, ErrorCode::kConnectionLost,
                              "the publisher is shutting down; no newer version will come from it",
                              io_deadline(ctx), kPeer);
  }
  return reply(ctx, MsgType::kVersion, VersionMsg{latest}.encode());
}

}  // namespace weightsync::detail
