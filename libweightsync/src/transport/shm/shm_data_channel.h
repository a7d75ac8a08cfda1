// Shared-memory transport, subscriber side: for a subscriber on the
// publisher's host. Connects to the publisher's abstract Unix socket,
// authenticates as part of the control session, receives read-only slot and
// stamp descriptors and maps them once. A read is a one-sided copy from the
// mapped slot into the destination, bracketed by stamp loads (seqlock).
#pragma once

#include <memory>
#include <string>

#include "transport/data_channel.h"
#include "transport/local_session.h"

namespace weightsync::detail {

Result<std::unique_ptr<DataChannel>> open_shm_data_channel(const LocalChannelConfig& config);

}  // namespace weightsync::detail
