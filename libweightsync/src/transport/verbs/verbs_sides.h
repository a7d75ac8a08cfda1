// The two sides of the ibverbs transport, for its factory
// (verbs_factory.cc); nothing outside transport/verbs/ includes this.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace weightsync::detail {

// Publisher side; start() opens the device and registers the slots.
std::unique_ptr<ServedTransport> make_verbs_server();

// Subscriber side: connects a queue pair through `exchange`.
Result<std::unique_ptr<DataChannel>> open_verbs_data_channel(const std::vector<std::uint8_t>& offer,
                                                             std::uint32_t slot_count,
                                                             std::uint64_t slot_bytes,
                                                             const TransportExchange& exchange);

// Whether an RDMA device with an active port exists here, and why not.
TransportInfo probe_verbs();

}  // namespace weightsync::detail
