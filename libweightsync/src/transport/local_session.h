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
#include "transport/transport.h"
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

// The channel config for a same-host offer (ShmOffer): kProtocolError if it
// is malformed; kInvalidConfig if the publisher runs on another host
// (another kernel or network namespace) or this host cannot be recognised.
Result<LocalChannelConfig> local_channel_config(const char* transport, const std::vector<std::uint8_t>& offer,
                                                const ChannelParams& params);

// This host's identity for a same-host offer; kInvalidConfig (not offered)
// when same-host peers cannot be recognised.
Result<std::string> local_host_for_serving();

// The peer name the same-host transports use in their errors.
inline constexpr const char* kLocalPublisherPeer = "publisher (local socket)";

}  // namespace weightsync::detail
