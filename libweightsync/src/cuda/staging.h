// Staged pulls into device memory: for transports that cannot write device
// memory, the read is split into windows of one staging chunk each; the
// transport reads window w into host chunk w % K while the copy engine moves
// the previous windows' chunks to the device (double buffering, never a
// whole-model staging copy). All windows are read under one lease; each
// window's stamp is checked, so a torn version is detected at the first
// window that sees the slot rewritten. See docs/gpu.md.
// Runs on the pulling thread; errors are Statuses.
#pragma once

#include "cuda/device_backend.h"
#include "transport/data_channel.h"

namespace weightsync::detail {

// Reads `base.plan` (device destinations) window by window through `engine`
// and waits for every copy. Returns the stamp of the last window, or the
// first stamp that differs from base.stamp (the caller reports it as torn),
// or the channel's or the engine's error.
Result<std::uint64_t> staged_read(DataChannel& channel, const ReadRequest& base, StagingEngine& engine);

}  // namespace weightsync::detail
