// CUDA IPC transport, subscriber side: for a subscriber on the host of a
// publisher whose slots are CUDA memory (PublisherOptions::slot_memory =
// kCuda). Connects to the publisher's abstract Unix socket, authenticates as
// part of the control session (as transport/shm does), receives each slot's
// CUDA IPC handle and the stamp page's read-only descriptor, and opens them
// once. A read is a device-to-device copy (cudaMemcpyAsync on the channel's
// stream, then a synchronize) from the publisher's slot into the
// destination, bracketed by stamp loads (seqlock). Host destinations work
// too (device-to-host). Checksums are never offered with CUDA slots.
#pragma once

#include <memory>
#include <string>

#include "transport/data_channel.h"
#include "transport/local_session.h"
#include "weightsync/transports.h"

namespace weightsync::detail {

Result<std::unique_ptr<DataChannel>> open_cuda_ipc_data_channel(const LocalChannelConfig& config);

// Viable when CUDA is usable here and same-host peers can be recognised.
TransportInfo probe_cuda_ipc();

}  // namespace weightsync::detail
