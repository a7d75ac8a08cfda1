// The shared-memory transport's factory (the only header the registry
// includes): for subscribers on the publisher's host, read-only sealed memfd
// slots mapped once, read with a one-sided copy bracketed by stamp loads.
// Publisher side: transport/local_server.h; subscriber side:
// shm_data_channel.h. Host slots only.
#pragma once

#include "transport/transport.h"

namespace weightsync::detail {

const TransportFactory& shm_transport_factory();

}  // namespace weightsync::detail
