// The control-plane request loop of one subscriber session.
#include <algorithm>

#include "common/log.h"
#include "publisher/connection_handlers.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {

constexpr const char* kPeer = "subscriber";
constexpr std::uint32_t kMaxWaitMs = 10 * 60 * 1000;

Deadline io_deadline(const HandlerContext& ctx) {
  return Deadline::after(std::chrono::milliseconds(ctx.io_timeout_ms));
}

Status reply(const HandlerContext& ctx, MsgType type, const std::vector<std::uint8_t>& payload) {
  return write_frame(*ctx.socket, type, payload, io_deadline(ctx), kPeer);
}

}  // namespace

Status reply_error(const HandlerContext& ctx, ErrorCode code, const std::string& message) {
  (void)write_frame(*ctx.socket, MsgType::kError, ErrorMsg{code, message}.encode(), io_deadline(ctx), kPeer);
  return Status(code, message);
}

Status serve_control(const HandlerContext& ctx) {
  SlotRing& ring = *ctx.state->ring;
  while (!ctx.stopping->load()) {
    auto frame = read_request(*ctx.socket, kMaxRequestPayload, ctx.io_timeout_ms, kPeer);
    if (!frame.ok()) {
      if (frame.status().code() == ErrorCode::kProtocolError) {
        return reply_error(ctx, ErrorCode::kProtocolError, frame.status().message());
      }
      return frame.status();
    }
    Status sent;
    WS_LOG(LogLevel::kTrace, "publisher: session {:x}: {}", ctx.session, to_string(frame->type));
    switch (frame->type) {
      case MsgType::kGetLayout: {
        if (!frame->payload.empty())
          return reply_error(ctx, ErrorCode::kProtocolError, "GET_LAYOUT has a payload");
        sent = reply(ctx, MsgType::kLayout, LayoutMsg{ctx.state->layout->serialize()}.encode());
        break;
      }
      case MsgType::kGetSlotTable: {
        if (!frame->payload.empty())
          return reply_error(ctx, ErrorCode::kProtocolError, "GET_SLOT_TABLE has a payload");
        SlotTableMsg table;
        table.slot_count = static_cast<std::uint32_t>(ring.slot_count());
        table.slot_bytes = ring.slot_bytes();
        table.checksums = ctx.state->checksums;
        table.transports = ctx.state->offers;
        sent = reply(ctx, MsgType::kSlotTable, table.encode());
        break;
      }
      case MsgType::kQueryVersion: {
        auto query = QueryVersionMsg::decode(frame->payload);
        if (!query.ok()) return reply_error(ctx, ErrorCode::kProtocolError, query.status().message());
        std::uint64_t latest = ring.latest_version();
        if (query->wait_ms > 0 && latest <= query->newer_than) {
          auto wait = std::chrono::milliseconds(std::min(query->wait_ms, kMaxWaitMs));
          latest = ring.wait_newer(query->newer_than, Deadline::after(wait));
          if (latest <= query->newer_than && ring.stopped()) {
            return reply_error(ctx, ErrorCode::kConnectionLost,
                               "the publisher is shutting down; no newer version will come from it");
          }
        }
        sent = reply(ctx, MsgType::kVersion, VersionMsg{latest}.encode());
        break;
      }
      case MsgType::kAcquire: {
        auto acquire = AcquireMsg::decode(frame->payload);
        if (!acquire.ok()) return reply_error(ctx, ErrorCode::kProtocolError, acquire.status().message());
        auto grant = ring.acquire(ctx.session, acquire->newer_than);
        if (!grant.ok()) {
          // A refused lease (nothing newer yet, too many leases) is an answer,
          // not a broken connection.
          sent =
              reply(ctx, MsgType::kError, ErrorMsg{grant.status().code(), grant.status().message()}.encode());
          break;
        }
        LeaseMsg lease{grant->lease_id, grant->version,      grant->slot,
                       grant->stamp,    grant->has_checksum, grant->checksum};
        sent = reply(ctx, MsgType::kLease, lease.encode());
        break;
      }
      case MsgType::kRelease: {
        auto release = ReleaseMsg::decode(frame->payload);
        if (!release.ok()) return reply_error(ctx, ErrorCode::kProtocolError, release.status().message());
        ring.release(ctx.session, release->lease_id);  // no reply by design
        break;
      }
      case MsgType::kTransportConnect: {
        auto request = TransportConnectMsg::decode(frame->payload);
        if (!request.ok()) return reply_error(ctx, ErrorCode::kProtocolError, request.status().message());
        auto accepted = ctx.state->transport_connect
                            ? ctx.state->transport_connect(request->transport, ctx.session, request->blob)
                            : Result<std::vector<std::uint8_t>>(
                                  Status(ErrorCode::kInvalidConfig, "no transport needs a connection here"));
        if (!accepted.ok()) {
          // A transport that cannot connect is an answer (the subscriber falls back), not a broken
          // connection.
          sent = reply(ctx, MsgType::kError,
                       ErrorMsg{accepted.status().code(), accepted.status().message()}.encode());
          break;
        }
        sent = reply(ctx, MsgType::kTransportAccept,
                     TransportConnectMsg{request->transport, *accepted}.encode());
        break;
      }
      case MsgType::kBye: return Status();
      default:
        return reply_error(ctx, ErrorCode::kProtocolError,
                           std::string("unexpected ") + to_string(frame->type) + " on a control connection");
    }
    if (!sent.ok()) return sent;
  }
  return Status();
}

}  // namespace weightsync::detail
