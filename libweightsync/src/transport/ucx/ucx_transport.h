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

// Publisher side, in two steps because UCX may have to allocate the slots:
// create_ucx_publisher() makes the UCX context and worker (refused when UCX's
// resources give unbounded one-sided access, unless the insecure override is
// set; see ucx_handles.h); the publisher builds its SlotRing (with
// slot_allocator() only when WEIGHTSYNC_SLOT_ALLOCATOR=ucx asks: UCX's
// shared-memory transports map that memory read-write into every
// subscriber); start() then maps every slot and the stamp page once, packs
// their rkeys into the offer, starts the worker's progress thread, and
// (without the override) fails unless the slots are UCX's own and UCX reaches
// every region natively. Publisher thread only.
class UcxPublisherTransport {
 public:
  virtual ~UcxPublisherTransport() = default;
  // ucp_mem_map(UCP_MEM_MAP_ALLOCATE) blocks; each keeps the context alive.
  virtual SlotAllocator slot_allocator(bool lock_memory) = 0;
  virtual Status start(const SlotRing& ring) = 0;
  virtual const std::vector<std::uint8_t>& offer() const = 0;
};

// `loopback_only`: the publisher listens on loopback; UCX's network
// transports are then restricted to the loopback device.
Result<std::unique_ptr<UcxPublisherTransport>> create_ucx_publisher(bool loopback_only);

// Subscriber side: connects to the publisher's worker and reads slots with
// ucp_get_nbx straight into the destination.
Result<std::unique_ptr<DataChannel>> open_ucx_data_channel(const std::vector<std::uint8_t>& offer,
                                                           std::uint32_t slot_count, std::uint64_t slot_bytes,
                                                           int connect_timeout_ms);

// Whether UCX is built in and can create a worker here (and which of its
// transports it would use), for available_transports().
TransportInfo probe_ucx();

}  // namespace weightsync::detail
