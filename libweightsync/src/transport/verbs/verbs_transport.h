// The ibverbs data transport's factory (the only header the registry
// includes). Built from verbs_*.cc when WEIGHTSYNC_WITH_VERBS found
// libibverbs, else from verbs_unavailable.cc, whose factory reports "not
// built" from every call.
//
// Publisher side: one protection domain, a memory region per slot and one
// for the stamp page, registered once at start; one RC queue pair per
// subscriber session, created on TRANSPORT_CONNECT and destroyed when the
// session ends. Subscriber side: an RC queue pair connected through
// ChannelParams::exchange; reads are RDMA READs straight into the
// destination (registered on first use). Not used with encryption (one-sided
// reads cannot be encrypted) or CUDA slots.
#pragma once

#include "transport/transport.h"

namespace weightsync::detail {

const TransportFactory& verbs_transport_factory();

}  // namespace weightsync::detail
