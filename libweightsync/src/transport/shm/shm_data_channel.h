// Shared-memory transport, subscriber side: for a subscriber on the
// publisher's host. Connects to the publisher's abstract Unix socket,
// authenticates as part of the control session, receives read-only slot and
// stamp descriptors and maps them once. A read is a one-sided copy from the
// mapped slot into the destination, bracketed by stamp loads (seqlock).
#pragma once

#include <memory>
#include <string>

#include "transport/data_channel.h"

namespace weightsync::detail {

struct ShmChannelConfig {
  std::string socket_name;
  std::string secret;
  std::uint64_t session_id = 0;
  std::string client_name;
  int connect_timeout_ms = 5000;
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
};

Result<std::unique_ptr<DataChannel>> open_shm_data_channel(const ShmChannelConfig& config);

}  // namespace weightsync::detail
