// The subscriber side of the publisher's local socket (an abstract Unix
// socket named in the offer), shared by the same-host transports shm and
// cuda_ipc: connect, authenticate as part of the control session (role 3,
// the secret's HMAC handshake), and read the one regions frame the publisher
// sends (SHM_REGIONS or CUDA_IPC_REGIONS; docs/protocol.md). Descriptors that
// follow the frame are read by the caller from `socket`, within `deadline`.
// Calling thread only; bounded by connect_timeout_ms.
#pragma once

#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "net/socket.h"
#include "wire/frame.h"

namespace weightsync::detail {

struct LocalChannelConfig {
  std::string socket_name;
  std::string secret;
  std::uint64_t session_id = 0;
  std::string client_name;
  int connect_timeout_ms = 5000;
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
};

struct LocalSession {
  Socket socket;
  Frame regions;
  Deadline deadline;
};

Result<LocalSession> open_local_session(const LocalChannelConfig& config, MsgType regions_type);

// The peer name the same-host transports use in their errors.
inline constexpr const char* kLocalPublisherPeer = "publisher (local socket)";

}  // namespace weightsync::detail
