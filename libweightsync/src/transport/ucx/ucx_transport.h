// The UCX data transport's entry points (the only header core code includes).
// Built from ucx_server.cc / ucx_data_channel.cc when WEIGHTSYNC_WITH_UCX
// found UCX, else from ucx_unavailable.cc, which reports "not built".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ring/slot_ring.h"
#include "transport/data_channel.h"
#include "weightsync/transports.h"

namespace weightsync::detail {

// Publisher side: maps every slot and the stamp page with UCX once, runs the
// worker's progress thread, and produces the offer blob for SLOT_TABLE.
class UcxPublisherTransport {
 public:
  virtual ~UcxPublisherTransport() = default;
  virtual const std::vector<std::uint8_t>& offer() const = 0;
};

Result<std::unique_ptr<UcxPublisherTransport>> start_ucx_publisher(const SlotRing& ring);

// Subscriber side: connects to the publisher's worker and reads slots with
// ucp_get_nbx straight into the destination.
Result<std::unique_ptr<DataChannel>> open_ucx_data_channel(const std::vector<std::uint8_t>& offer,
                                                           std::uint32_t slot_count, std::uint64_t slot_bytes,
                                                           int connect_timeout_ms);

// Whether UCX is built in and can create a worker here (and which of its
// transports it would use), for available_transports().
TransportInfo probe_ucx();

}  // namespace weightsync::detail
