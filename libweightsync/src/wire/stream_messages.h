// Messages of the named-stream extension (docs/protocol.md, "Named streams"):
// a publisher that serves several rings behind one address (adapters,
// weightsync/adapter_publisher.h) lets a control session pick one with
// SELECT_STREAM, answered by STREAM_SELECTED (empty) or ERROR. Decoders
// reject malformed names and trailing bytes with kProtocolError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weightsync/status.h"

namespace weightsync::detail {

// A stream (adapter) name: 1..64 bytes of [A-Za-z0-9._-].
inline constexpr std::size_t kMaxStreamName = 64;
bool valid_stream_name(const std::string& name) noexcept;
// Why `name` is not a valid stream name (empty when it is).
std::string stream_name_problem(const std::string& name);

struct SelectStreamMsg {
  std::string name;
  std::vector<std::uint8_t> encode() const;
  static Result<SelectStreamMsg> decode(const std::vector<std::uint8_t>& p);
};

}  // namespace weightsync::detail
