// FrameAssembler: builds whole frames out of the bytes a non-blocking socket
// has ready, so one event-loop thread can serve many connections without
// blocking on any of them (publisher/server.h).
//
// The header is checked the moment its 16 bytes are in (decode_header), so a
// frame longer than the current limit is refused before a payload byte is
// read or any memory is set aside for it. The limit can change between frames
// (small before authentication, larger after).
//
// Threads: one owner at a time (the event loop, or the worker it handed the
// connection to). Never throws except std::bad_alloc.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "net/socket.h"
#include "wire/frame.h"

namespace weightsync::detail {

class FrameAssembler {
 public:
  enum class Progress {
    kNeedMore,  // the socket has nothing more for now; the frame is incomplete
    kFrame,     // take_frame() returns a complete frame
  };

  // Reads what the socket has ready (without blocking) until a frame is
  // complete or the socket would block. kConnectionLost on EOF or a reset;
  // kProtocolError for a bad header or one longer than `max_payload`.
  Result<Progress> read_from(const Socket& socket, std::uint32_t max_payload, const char* peer);
  // The completed frame; the assembler starts on the next one.
  Frame take_frame();
  // True while part of a frame (at least one byte) has arrived.
  bool partial() const noexcept { return header_filled_ > 0 && !complete_; }
  bool complete() const noexcept { return complete_; }

 private:
  std::uint8_t header_[kFrameHeaderBytes] = {};
  std::size_t header_filled_ = 0;
  std::optional<FrameHeader> header_decoded_;
  std::vector<std::uint8_t> payload_;
  std::size_t payload_filled_ = 0;
  bool complete_ = false;
};

}  // namespace weightsync::detail
