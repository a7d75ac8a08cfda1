// Whole-frame socket I/O.
#include "wire/frame_io.h"

#include "common/printable.h"
#include "wire/messages.h"

namespace weightsync::detail {

Status write_frame(const Socket& socket, MsgType type, const std::vector<std::uint8_t>& payload,
                   Deadline deadline, const char* peer) {
  if (payload.size() > UINT32_MAX) {
    return Status(ErrorCode::kInternal, std::string("frame payload too large for ") + to_string(type));
  }
  std::uint8_t header[kFrameHeaderBytes];
  encode_header(type, static_cast<std::uint32_t>(payload.size()), header);
  iovec iov[2] = {{header, kFrameHeaderBytes}, {const_cast<std::uint8_t*>(payload.data()), payload.size()}};
  return send_iov(socket, iov, payload.empty() ? 1 : 2, deadline, peer);
}

Result<Frame> read_frame(const Socket& socket, std::uint32_t max_payload, Deadline idle, Deadline io,
                         const char* peer) {
  Status ready = wait_readable(socket, idle, peer);
  if (!ready.ok()) return ready;
  std::uint8_t header[kFrameHeaderBytes];
  Status s = recv_all(socket, header, sizeof(header), io, peer);
  if (!s.ok()) return s;
  auto decoded = decode_header(header, max_payload);
  if (!decoded.ok()) return decoded.status();
  Frame frame;
  frame.type = decoded->type;
  frame.payload.resize(decoded->payload_bytes);
  if (!frame.payload.empty()) {
    s = recv_all(socket, frame.payload.data(), frame.payload.size(), io, peer);
    if (!s.ok()) return s;
  }
  return frame;
}

Result<Frame> read_request(const Socket& socket, std::uint32_t max_payload, int io_timeout_ms,
                           const char* peer) {
  Status ready = wait_readable(socket, Deadline::never(), peer);
  if (!ready.ok()) return ready;
  const Deadline io = Deadline::after(std::chrono::milliseconds(io_timeout_ms));
  return read_frame(socket, max_payload, io, io, peer);
}

Status reply_error(const Socket& socket, ErrorCode code, const std::string& message, Deadline deadline,
                   const char* peer) {
  (void)write_frame(socket, MsgType::kError, ErrorMsg{code, message}.encode(), deadline, peer);
  return Status(code, message);
}

Result<Frame> read_expected(const Socket& socket, MsgType expected, std::uint32_t max_payload,
                            Deadline deadline, const char* peer) {
  auto frame = read_frame(socket, max_payload, deadline, deadline, peer);
  if (!frame.ok()) return frame.status();
  return expect_reply(std::move(*frame), expected, peer);
}

Result<Frame> expect_reply(Frame frame, MsgType expected, const char* peer) {
  if (frame.type == MsgType::kError) {
    auto err = ErrorMsg::decode(frame.payload);
    if (!err.ok()) return err.status();
    return Status(err->code, std::string(peer) + " refused: " + printable(err->message, kMaxErrorMessage));
  }
  if (frame.type != expected) {
    return Status(ErrorCode::kProtocolError, std::string("expected ") + to_string(expected) + " from " +
                                                 peer + ", got " + to_string(frame.type));
  }
  return frame;
}

}  // namespace weightsync::detail
