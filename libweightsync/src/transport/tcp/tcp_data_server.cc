// TCP data transport, publisher side: READ requests are answered with a DATA
// frame, the requested slot ranges sent straight from slot memory (no staging
// copy), and a DATA_END frame carrying the slot's seqlock stamp read after the
// last byte left slot memory (docs/consistency.md).
#include "transport/tcp/tcp_data_server.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/tsan.h"
#include "wire/frame_io.h"
#include "wire/messages.h"

namespace weightsync::detail {
namespace {

constexpr const char* kPeer = "subscriber";

// The ranges' total if every range lies in the slot and they add up to at
// most one slot; else why not.
Result<std::uint64_t> checked_total(const ReadMsg& read, std::uint64_t slot_bytes) {
  std::uint64_t total = 0;
  for (const auto& range : read.ranges) {
    std::uint64_t end = 0;
    if (__builtin_add_overflow(range.offset, range.length, &end) || end > slot_bytes) {
      return Status(ErrorCode::kInvalidArgument, "READ range [" + std::to_string(range.offset) + ", +" +
                                                     std::to_string(range.length) + ") is outside the " +
                                                     std::to_string(slot_bytes) + "-byte slot");
    }
    if (__builtin_add_overflow(total, range.length, &total) || total > slot_bytes) {
      return Status(ErrorCode::kInvalidArgument,
                    "READ asks for more bytes than the " + std::to_string(slot_bytes) +
                        "-byte slot holds (overlapping or repeated ranges); ask for each byte once");
    }
  }
  return total;
}

// Below this mean range length a READ is gathered into a bounce buffer and
// sent in large pieces: the kernel's per-iovec cost of many small segments
// (a column slice at a high TP degree) outweighs one more user-space copy.
// docs/perf/sharded.md, "Narrow column slices over tcp".
constexpr std::uint64_t kGatherBelowMeanRange = 4096;
constexpr std::size_t kBounceBytes = 1u << 20;

// Sends the ranges of `base` through a per-thread bounce buffer.
Status send_gathered(const Socket& socket, const char* base, const std::vector<ByteRange>& ranges,
                     int io_timeout_ms) {
  thread_local std::vector<char> bounce(kBounceBytes);
  Status s;
  std::size_t i = 0;
  std::uint64_t done_in_range = 0;
  while (i < ranges.size() && s.ok()) {
    std::size_t fill = 0;
    while (fill < bounce.size() && i < ranges.size()) {
      const ByteRange& range = ranges[i];
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(range.length - done_in_range, bounce.size() - fill));
      std::memcpy(bounce.data() + fill, base + range.offset + done_in_range, n);
      fill += n;
      done_in_range += n;
      if (done_in_range == range.length) {
        ++i;
        done_in_range = 0;
      }
    }
    iovec one{bounce.data(), fill};
    s = send_iov(socket, &one, 1, Deadline::never(), kPeer, io_timeout_ms);
  }
  return s;
}

}  // namespace

Status serve_tcp_read(const Socket& socket, SlotRing& ring, std::uint64_t session,
                      const std::vector<std::uint8_t>& request, int io_timeout_ms,
                      std::atomic<std::uint64_t>* bytes_served) {
  // Every write gets its own deadline: a transfer may take longer than the I/O timeout.
  auto io = [&] { return Deadline::after(std::chrono::milliseconds(io_timeout_ms)); };
  if (ring.slot_memory_kind() != MemoryKind::kHost) {
    // Not offered with CUDA slots; a peer that asks anyway is refused.
    return reply_error(socket, ErrorCode::kInvalidConfig,
                       "this publisher's slots are CUDA memory: only the cuda_ipc transport serves them",
                       io(), kPeer);
  }
  auto read = ReadMsg::decode(request);
  if (!read.ok()) return reply_error(socket, ErrorCode::kProtocolError, read.status().message(), io(), kPeer);
  // Bounds before anything else: an out-of-range request closes the connection.
  auto total = checked_total(*read, ring.slot_bytes());
  if (!total.ok()) return reply_error(socket, total.status().code(), total.status().message(), io(), kPeer);

  auto lease = ring.check_lease(session, read->lease_id);
  if (!lease.ok()) {
    if (lease.status().code() == ErrorCode::kVersionRevoked) {
      return write_frame(socket, MsgType::kError,
                         ErrorMsg{ErrorCode::kVersionRevoked, lease.status().message()}.encode(), io(),
                         kPeer);
    }
    return reply_error(socket, ErrorCode::kInvalidArgument, "READ names a lease this session does not hold",
                       io(), kPeer);
  }
  const bool streaming = (lease->stamp & 1) != 0;
  if (streaming) {
    // A streaming lease reads only below the watermark: bytes the relay has
    // not written yet are never sent (docs/consistency.md).
    auto state = ring.stream_state(session, read->lease_id);
    if (!state.ok()) {
      return write_frame(socket, MsgType::kError,
                         ErrorMsg{ErrorCode::kVersionRevoked, state.status().message()}.encode(), io(), kPeer);
    }
    for (const auto& range : read->ranges) {
      if (range.offset + range.length > state->watermark) {
        return reply_error(socket, ErrorCode::kInvalidArgument,
                           "READ range [" + std::to_string(range.offset) + ", +" + std::to_string(range.length) +
                               ") is above the in-progress version's watermark (" +
                               std::to_string(state->watermark) + " bytes written)",
                           io(), kPeer);
      }
    }
  }
  const std::uint64_t before = ring.stamp_before(lease->slot);
  if (before != lease->stamp && !(streaming && before == (lease->version << 1))) {
    return write_frame(
        socket, MsgType::kError,
        ErrorMsg{ErrorCode::kVersionRevoked, "slot was rewritten before the read; pull again"}.encode(), io(),
        kPeer);
  }

  Status s = write_frame(socket, MsgType::kData, DataMsg{*total}.encode(), io(), kPeer);
  if (!s.ok()) return s;
  auto* base = static_cast<char*>(ring.slot_data(lease->slot));
  WS_SEQLOCK_READ_BEGIN();  // may race a revoking writer; stamp_after decides
  if (*total / read->ranges.size() < kGatherBelowMeanRange) {
    s = send_gathered(socket, base, read->ranges, io_timeout_ms);
  } else {
    std::vector<iovec> iov;
    iov.reserve(read->ranges.size());
    for (const auto& range : read->ranges) iov.push_back(iovec{base + range.offset, range.length});
    s = send_iov(socket, iov.data(), iov.size(), Deadline::never(), kPeer, io_timeout_ms);
  }
  WS_SEQLOCK_READ_END();
  if (!s.ok()) return s;
  const std::uint64_t stamp_after = ring.stamp_after(lease->slot);
  if (bytes_served != nullptr) bytes_served->fetch_add(*total);
  return write_frame(socket, MsgType::kDataEnd, DataEndMsg{stamp_after}.encode(), io(), kPeer);
}

}  // namespace weightsync::detail
