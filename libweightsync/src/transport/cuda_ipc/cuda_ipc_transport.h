// The CUDA IPC transport's factory (the only header the registry includes):
// for subscribers on the host of a publisher whose slots are CUDA memory
// (PublisherOptions::slot_memory = kCuda), the only transport that serves
// such slots. Publisher side: transport/local_server.h; subscriber side:
// cuda_ipc_data_channel.h.
#pragma once

#include "transport/transport.h"

namespace weightsync::detail {

const TransportFactory& cuda_ipc_transport_factory();

}  // namespace weightsync::detail
