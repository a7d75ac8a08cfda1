// Same-host transports, publisher side (docs/transports.md): after the
// handshake on the local Unix socket, hands an authenticated subscriber what
// it maps once and then reads one-sidedly:
//   shm:      SHM_REGIONS and a read-only, sealed memfd per slot and for the
//             stamp page;
//   cuda_ipc: (CUDA slots) CUDA_IPC_REGIONS with each slot's IPC handle and
//             the stamp page's read-only memfd.
// The caller closes the connection afterwards. Errors: kInternal when a
// descriptor or handle cannot be made (the peer is sent ERROR), else the
// socket's error.
//
// Threads: any thread; the ring is only read.
#pragma once

#include "net/socket.h"
#include "ring/slot_ring.h"

namespace weightsync::detail {

Status serve_local_regions(const Socket& socket, const SlotRing& ring, int io_timeout_ms);

}  // namespace weightsync::detail
