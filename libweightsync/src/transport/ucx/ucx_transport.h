// The UCX data transport's factory (the only header the registry includes).
// Built from ucx_*.cc when WEIGHTSYNC_WITH_UCX found UCX, else from
// ucx_unavailable.cc, whose factory reports "not built" from every call.
//
// Publisher side, in two steps because UCX may have to allocate the slots:
// serve() makes the UCX context and worker (refused when UCX's resources give
// unbounded one-sided access, unless the insecure override is set; see
// ucx_handles.h); the publisher builds its SlotRing (with slot_allocator()
// only when WEIGHTSYNC_SLOT_ALLOCATOR=ucx asks: UCX's shared-memory
// transports map that memory read-write into every subscriber); start() then
// maps every slot and the stamp page once, packs their rkeys into the offer,
// starts the worker's progress thread, and (without the override) fails
// unless the slots are UCX's own and UCX reaches every region natively.
// Subscriber side: connects to the publisher's worker and reads slots with
// ucp_get_nbx straight into the destination. Not used with encryption or
// CUDA slots.
#pragma once

#include "transport/transport.h"

namespace weightsync::detail {

const TransportFactory& ucx_transport_factory();

}  // namespace weightsync::detail
