// Reading and writing whole frames on a Socket.
#pragma once

#include <string>
#include <vector>

#include "net/socket.h"
#include "wire/frame.h"

namespace weightsync::detail {

Status write_frame(const Socket& socket, MsgType type, const std::vector<std::uint8_t>& payload,
                   Deadline deadline, const char* peer);

// Waits for a frame to start until `idle` passes (kTimeout), then reads the
// rest within `io` (a peer that stalls mid-frame is a kTimeout). A header that
// fails decode_header() is a kProtocolError; no payload byte is read then.
Result<Frame> read_frame(const Socket& socket, std::uint32_t max_payload, Deadline idle, Deadline io,
                         const char* peer);

// Server side: waits without limit (until data, EOF or shutdown) for the next
// request to start, then reads the rest of it within io_timeout_ms counted
// from its first byte.
Result<Frame> read_request(const Socket& socket, std::uint32_t max_payload, int io_timeout_ms,
                           const char* peer);

// Sends ERROR(code, message) (best effort: a failure to send is ignored) and
// returns Status(code, message), so a handler can `return reply_error(...)`.
Status reply_error(const Socket& socket, ErrorCode code, const std::string& message, Deadline deadline,
                   const char* peer);

// Reads one frame and, if it is an ERROR frame, turns it into its Status;
// if it is not of type `expected`, a kProtocolError.
Result<Frame> read_expected(const Socket& socket, MsgType expected, std::uint32_t max_payload,
                            Deadline deadline, const char* peer);
// The same check on a frame already read: ERROR becomes its Status, another
// type than `expected` a kProtocolError.
Result<Frame> expect_reply(Frame frame, MsgType expected, const char* peer);

}  // namespace weightsync::detail
