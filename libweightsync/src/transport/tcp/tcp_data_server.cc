// TCP data transport, publisher side: READ requests are answered with a DATA
// frame, the requested slot ranges sent straight from slot memory (no staging
// copy), and a DATA_END frame carrying the slot's seqlock stamp read after the
// last byte left slot memory (docs/consistency.md).
#include <sys/uio.h>

#include <vector>

#include "common/tsan.h"
#include "publisher/connection_handlers.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {
constexpr const char* kPeer = "subscriber";
}

Status serve_tcp_data(const HandlerContext& ctx) {
  SlotRing& ring = *ctx.state->ring;
  if (ring.slot_memory_kind() != MemoryKind::kHost) {
    // Not offered with CUDA slots; a peer that asks anyway is refused.
    return reply_error(ctx, ErrorCode::kInvalidConfig,
                       "this publisher's slots are CUDA memory: only the cuda_ipc transport serves them");
  }
  const std::uint64_t slot_bytes = ring.slot_bytes();
  std::vector<iovec> iov;
  while (!ctx.stopping->load()) {
    // Every write gets its own deadline: a transfer may take longer than the I/O timeout.
    auto io = [&] { return Deadline::after(std::chrono::milliseconds(ctx.io_timeout_ms)); };
    auto frame = read_request(*ctx.socket, kMaxRequestPayload, ctx.io_timeout_ms, kPeer);
    if (!frame.ok()) {
      if (frame.status().code() == ErrorCode::kProtocolError) {
        return reply_error(ctx, ErrorCode::kProtocolError, frame.status().message());
      }
      return frame.status();
    }
    if (frame->type == MsgType::kBye) return Status();
    if (frame->type != MsgType::kRead) {
      return reply_error(ctx, ErrorCode::kProtocolError,
                         std::string("unexpected ") + to_string(frame->type) + " on a data connection");
    }
    auto read = ReadMsg::decode(frame->payload);
    if (!read.ok()) return reply_error(ctx, ErrorCode::kProtocolError, read.status().message());

    // Bounds before anything else: an out-of-range request closes the connection.
    std::uint64_t total = 0;
    for (const auto& range : read->ranges) {
      std::uint64_t end = 0;
      if (__builtin_add_overflow(range.offset, range.length, &end) || end > slot_bytes ||
          __builtin_add_overflow(total, range.length, &total)) {
        return reply_error(ctx, ErrorCode::kInvalidArgument,
                           "READ range [" + std::to_string(range.offset) + ", +" +
                               std::to_string(range.length) + ") is outside the " +
                               std::to_string(slot_bytes) + "-byte slot");
      }
    }
    auto lease = ring.check_lease(ctx.session, read->lease_id);
    if (!lease.ok()) {
      if (lease.status().code() == ErrorCode::kVersionRevoked) {
        Status s =
            write_frame(*ctx.socket, MsgType::kError,
                        ErrorMsg{ErrorCode::kVersionRevoked, lease.status().message()}.encode(), io(), kPeer);
        if (!s.ok()) return s;
        continue;
      }
      return reply_error(ctx, ErrorCode::kInvalidArgument, "READ names a lease this session does not hold");
    }
    const std::uint64_t stamp_before = ring.stamp_before(lease->slot);
    if (stamp_before != lease->stamp) {
      Status s = write_frame(
          *ctx.socket, MsgType::kError,
          ErrorMsg{ErrorCode::kVersionRevoked, "slot was rewritten before the read; pull again"}.encode(),
          io(), kPeer);
      if (!s.ok()) return s;
      continue;
    }

    Status s = write_frame(*ctx.socket, MsgType::kData, DataMsg{total}.encode(), io(), kPeer);
    if (!s.ok()) return s;
    auto* base = static_cast<char*>(ring.slot_data(lease->slot));
    iov.clear();
    for (const auto& range : read->ranges) iov.push_back(iovec{base + range.offset, range.length});
    WS_SEQLOCK_READ_BEGIN();  // may race a revoking writer; stamp_after decides
    s = send_iov(*ctx.socket, iov.data(), iov.size(), Deadline::never(), kPeer, ctx.io_timeout_ms);
    WS_SEQLOCK_READ_END();
    if (!s.ok()) return s;
    const std::uint64_t stamp_after = ring.stamp_after(lease->slot);
    ctx.counters->bytes_served.fetch_add(total);
    s = write_frame(*ctx.socket, MsgType::kDataEnd, DataEndMsg{stamp_after}.encode(), io(), kPeer);
    if (!s.ok()) return s;
  }
  return Status();
}

}  // namespace weightsync::detail
