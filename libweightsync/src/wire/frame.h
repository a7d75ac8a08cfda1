// Frames of the control protocol (docs/protocol.md, "Framing"): a 16-byte
// header {magic, protocol version, type, payload length, reserved} followed by
// the payload. Parsing checks every header field before any payload byte is
// read, so a huge or malformed length never allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "weightsync/status.h"

namespace weightsync::detail {

inline constexpr std::uint32_t kFrameMagic = 0x4e595357u;  // "WSYN" on the wire
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 16;
// Largest payload a publisher accepts from a subscriber.
inline constexpr std::uint32_t kMaxRequestPayload = 128 * 1024;
// Largest payload a subscriber accepts from a publisher (a layout may be big).
inline constexpr std::uint32_t kMaxReplyPayload = 64 * 1024 * 1024;
// Largest payload either side accepts during the handshake (HELLO, CHALLENGE,
// AUTH, WELCOME, or an ERROR in their place), before the peer is
// authenticated. It covers the largest legitimate one, an ERROR with a
// kMaxErrorMessage-byte message (auth/handshake.cc checks this).
inline constexpr std::uint32_t kMaxHandshakePayload = 8 * 1024;

enum class MsgType : std::uint16_t {
  kHello = 1,
  kChallenge = 2,
  kAuth = 3,
  kWelcome = 4,
  kError = 5,
  kGetLayout = 10,
  kLayout = 11,
  kGetSlotTable = 12,
  kSlotTable = 13,
  kQueryVersion = 14,
  kVersion = 15,
  kAcquire = 16,
  kLease = 17,
  kRelease = 18,
  kRead = 20,
  kData = 21,
  kDataEnd = 22,
  kShmRegions = 23,
  kTransportConnect = 24,
  kTransportAccept = 25,
  kCudaIpcRegions = 26,
  kWaitWatermark = 27,
  kWatermark = 28,
  kRegisterView = 31,
  kView = 32,
  kAcquireView = 33,
  kFetchDelta = 34,
  kDelta = 35,
  kFetchSignature = 36,
  kSignature = 37,
  kSelectStream = 38,
  kStreamSelected = 39,
  kBye = 30,
};

const char* to_string(MsgType type) noexcept;
bool is_known(std::uint16_t type) noexcept;

struct FrameHeader {
  MsgType type = MsgType::kError;
  std::uint32_t payload_bytes = 0;
};

void encode_header(MsgType type, std::uint32_t payload_bytes, std::uint8_t out[kFrameHeaderBytes]);
// kProtocolError for a bad magic, another protocol version, an unknown type,
// a non-zero reserved field, or a payload longer than max_payload.
Result<FrameHeader> decode_header(const std::uint8_t in[kFrameHeaderBytes], std::uint32_t max_payload);

struct Frame {
  MsgType type = MsgType::kError;
  std::vector<std::uint8_t> payload;
};

}  // namespace weightsync::detail
