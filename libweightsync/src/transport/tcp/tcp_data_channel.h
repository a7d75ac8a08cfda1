// TCP data transport, subscriber side: an authenticated second connection to
// the publisher, joined to the control session. Bytes are received with
// recvmsg(2) straight into the destination pieces: no staging copy.
#pragma once

#include <memory>

#include "net/socket.h"
#include "transport/data_channel.h"

namespace weightsync::detail {

struct TcpChannelConfig {
  HostPort publisher;
  std::string secret;
  std::uint64_t session_id = 0;
  std::string client_name;
  int connect_timeout_ms = 5000;
  bool encryption = false;  // every byte in AES-GCM records (net/record_layer.h)
};

Result<std::unique_ptr<DataChannel>> open_tcp_data_channel(const TcpChannelConfig& config);

}  // namespace weightsync::detail
