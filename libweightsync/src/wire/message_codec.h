// Helpers the message decoders share (messages.cc, transport_messages.cc):
// the protocol error for a malformed message, the no-trailing-bytes check and
// a strict boolean. Internal to wire/.
#pragma once

#include <cstdint>
#include <string>

#include "common/byte_codec.h"
#include "weightsync/status.h"

namespace weightsync::detail {

inline Status malformed(const char* what) {
  return Status(ErrorCode::kProtocolError, std::string("malformed ") + what + " message");
}

// A decoder accepts a message only when every byte was consumed.
inline bool finish(const ByteReader& r) {
  return r.remaining() == 0;
}

// A flag byte: 0 or 1, anything else malformed.
inline bool read_flag(ByteReader& r, bool* out) {
  std::uint8_t v = 0;
  if (!r.u8(&v) || v > 1) return false;
  *out = v == 1;
  return true;
}

}  // namespace weightsync::detail
