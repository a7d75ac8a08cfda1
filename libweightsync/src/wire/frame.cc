// Frame header encoding and validation.
#include "wire/frame.h"

#include <string>

#include "common/byte_codec.h"

namespace weightsync::detail {

const char* to_string(MsgType type) noexcept {
  switch (type) {
    case MsgType::kHello: return "HELLO";
    case MsgType::kChallenge: return "CHALLENGE";
    case MsgType::kAuth: return "AUTH";
    case MsgType::kWelcome: return "WELCOME";
    case MsgType::kError: return "ERROR";
    case MsgType::kGetLayout: return "GET_LAYOUT";
    case MsgType::kLayout: return "LAYOUT";
    case MsgType::kGetSlotTable: return "GET_SLOT_TABLE";
    case MsgType::kSlotTable: return "SLOT_TABLE";
    case MsgType::kQueryVersion: return "QUERY_VERSION";
    case MsgType::kVersion: return "VERSION";
    case MsgType::kAcquire: return "ACQUIRE";
    case MsgType::kLease: return "LEASE";
    case MsgType::kRelease: return "RELEASE";
    case MsgType::kRead: return "READ";
    case MsgType::kData: return "DATA";
    case MsgType::kDataEnd: return "DATA_END";
    case MsgType::kShmRegions: return "SHM_REGIONS";
    case MsgType::kTransportConnect: return "TRANSPORT_CONNECT";
    case MsgType::kTransportAccept: return "TRANSPORT_ACCEPT";
    case MsgType::kCudaIpcRegions: return "CUDA_IPC_REGIONS";
    case MsgType::kWaitWatermark: return "WAIT_WATERMARK";
    case MsgType::kWatermark: return "WATERMARK";
    case MsgType::kRegisterView: return "REGISTER_VIEW";
    case MsgType::kView: return "VIEW";
    case MsgType::kAcquireView: return "ACQUIRE_VIEW";
    case MsgType::kFetchDelta: return "FETCH_DELTA";
    case MsgType::kDelta: return "DELTA";
    case MsgType::kFetchSignature: return "FETCH_SIGNATURE";
    case MsgType::kSignature: return "SIGNATURE";
    case MsgType::kSelectStream: return "SELECT_STREAM";
    case MsgType::kStreamSelected: return "STREAM_SELECTED";
    case MsgType::kBye: return "BYE";
  }
  return "UNKNOWN";
}

bool is_known(std::uint16_t type) noexcept {
  return std::string(to_string(static_cast<MsgType>(type))) != "UNKNOWN";
}

void encode_header(MsgType type, std::uint32_t payload_bytes, std::uint8_t out[kFrameHeaderBytes]) {
  ByteWriter w;
  w.u32(kFrameMagic);
  w.u16(kProtocolVersion);
  w.u16(static_cast<std::uint16_t>(type));
  w.u32(payload_bytes);
  w.u32(0);
  auto bytes = w.take();
  std::memcpy(out, bytes.data(), kFrameHeaderBytes);
}

Result<FrameHeader> decode_header(const std::uint8_t in[kFrameHeaderBytes], std::uint32_t max_payload) {
  ByteReader r(in, kFrameHeaderBytes);
  std::uint32_t magic = 0, length = 0, reserved = 0;
  std::uint16_t version = 0, type = 0;
  r.u32(&magic);
  r.u16(&version);
  r.u16(&type);
  r.u32(&length);
  r.u32(&reserved);
  if (magic != kFrameMagic) {
    return Status(ErrorCode::kProtocolError, "peer does not speak the weightsync protocol (bad frame magic)");
  }
  if (version != kProtocolVersion) {
    return Status(ErrorCode::kProtocolError, "peer speaks weightsync protocol version " +
                                                 std::to_string(version) + ", this library speaks " +
                                                 std::to_string(kProtocolVersion) +
                                                 "; run the same weightsync release on both sides");
  }
  if (!is_known(type)) {
    return Status(ErrorCode::kProtocolError, "unknown frame type " + std::to_string(type));
  }
  if (reserved != 0) return Status(ErrorCode::kProtocolError, "frame reserved field is not zero");
  if (length > max_payload) {
    return Status(ErrorCode::kProtocolError, "frame payload of " + std::to_string(length) +
                                                 " bytes exceeds the limit of " +
                                                 std::to_string(max_payload));
  }
  return FrameHeader{static_cast<MsgType>(type), length};
}

}  // namespace weightsync::detail
