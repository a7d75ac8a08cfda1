// The ibverbs data transport's entry points (the only header core code
// includes). Built from verbs_*.cc when WEIGHTSYNC_WITH_VERBS found
// libibverbs, else from verbs_unavailable.cc, which reports "not built".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ring/slot_ring.h"
#include "transport/data_channel.h"
#include "weightsync/transports.h"

namespace weightsync::detail {

// Publisher side: one protection domain, a memory region per slot and one for
// the stamp page, registered once at start; one RC queue pair per subscriber
// session, created on TRANSPORT_CONNECT and destroyed when the session ends.
class VerbsPublisherTransport {
 public:
  virtual ~VerbsPublisherTransport() = default;
  virtual const std::vector<std::uint8_t>& offer() const = 0;
  // Handles a subscriber's connection blob; returns the publisher's.
  virtual Result<std::vector<std::uint8_t>> connect(std::uint64_t session,
                                                    const std::vector<std::uint8_t>& blob) = 0;
  virtual void session_closed(std::uint64_t session) = 0;
};

Result<std::unique_ptr<VerbsPublisherTransport>> start_verbs_publisher(const SlotRing& ring);

// Exchanges connection blobs with the publisher over the control connection.
using TransportExchange =
    std::function<Result<std::vector<std::uint8_t>>(const std::string&, const std::vector<std::uint8_t>&)>;

// Subscriber side: an RC queue pair connected through `exchange`; reads are
// RDMA READs straight into the destination (registered on first use).
Result<std::unique_ptr<DataChannel>> open_verbs_data_channel(const std::vector<std::uint8_t>& offer,
                                                             std::uint32_t slot_count,
                                                             std::uint64_t slot_bytes,
                                                             const TransportExchange& exchange);

// Whether an RDMA device with an active port exists here, and why not.
TransportInfo probe_verbs();

}  // namespace weightsync::detail
