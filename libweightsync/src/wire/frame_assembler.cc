// FrameAssembler: non-blocking, incremental frame reads.
#include "wire/frame_assembler.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "net/record_layer.h"

namespace weightsync::detail {
namespace {

// One recv without blocking: bytes read, 0 when it would block; EOF and
// errors are Statuses.
Result<std::size_t> recv_ready(const Socket& socket, void* data, std::size_t bytes, const char* peer) {
  if (RecordLayer* records = socket.records()) return records->read_some(socket.fd(), data, bytes, peer);
  for (;;) {
    ssize_t n = ::recv(socket.fd(), data, bytes, MSG_DONTWAIT);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) return Status(ErrorCode::kConnectionLost, std::string(peer) + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::size_t{0};
    return Status(ErrorCode::kConnectionLost,
                  std::string("connection to ") + peer + " failed: " + std::strerror(errno));
  }
}

}  // namespace

Result<FrameAssembler::Progress> FrameAssembler::read_from(const Socket& socket, std::uint32_t max_payload,
                                                           const char* peer) {
  while (!complete_) {
    if (header_filled_ < kFrameHeaderBytes) {
      auto n = recv_ready(socket, header_ + header_filled_, kFrameHeaderBytes - header_filled_, peer);
      if (!n.ok()) return n.status();
      if (*n == 0) return Progress::kNeedMore;
      header_filled_ += *n;
      if (header_filled_ < kFrameHeaderBytes) continue;
      auto decoded = decode_header(header_, max_payload);
      if (!decoded.ok()) return decoded.status();
      header_decoded_ = *decoded;
      payload_.assign(decoded->payload_bytes, 0);
      payload_filled_ = 0;
      complete_ = decoded->payload_bytes == 0;
      continue;
    }
    auto n = recv_ready(socket, payload_.data() + payload_filled_, payload_.size() - payload_filled_, peer);
    if (!n.ok()) return n.status();
    if (*n == 0) return Progress::kNeedMore;
    payload_filled_ += *n;
    complete_ = payload_filled_ == payload_.size();
  }
  return Progress::kFrame;
}

Frame FrameAssembler::take_frame() {
  Frame frame;
  frame.type = header_decoded_ ? header_decoded_->type : MsgType::kError;
  frame.payload = std::move(payload_);
  payload_.clear();
  header_filled_ = 0;
  payload_filled_ = 0;
  header_decoded_.reset();
  complete_ = false;
  return frame;
}

}  // namespace weightsync::detail
