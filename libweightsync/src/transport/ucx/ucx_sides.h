// The two sides of the UCX transport, for its factory (ucx_factory.cc);
// nothing outside transport/ucx/ includes this.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace weightsync::detail {

// `loopback_only`: the publisher listens on loopback; UCX's network
// transports are then restricted to the loopback device.
Result<std::unique_ptr<ServedTransport>> create_ucx_publisher(bool loopback_only);

Result<std::unique_ptr<DataChannel>> open_ucx_data_channel(const std::vector<std::uint8_t>& offer,
                                                           std::uint32_t slot_count, std::uint64_t slot_bytes,
                                                           int connect_timeout_ms);

// Whether UCX can create a worker here (and which of its transports it would use).
TransportInfo probe_ucx();

}  // namespace weightsync::detail
