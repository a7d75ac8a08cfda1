// The publisher side of the same-host transports (docs/transports.md), shm
// (host slots) and cuda_ipc (CUDA slots): both serve from one abstract Unix
// socket with an unguessable name, offered with this host's identity (boot id
// + network namespace, or WEIGHTSYNC_HOST_ID; common/host_identity.h). After
// the handshake on that socket (role kShm), an authenticated subscriber is
// handed what it maps once and then reads one-sidedly:
//   shm:      SHM_REGIONS and a read-only, sealed memfd per slot and for the
//             stamp page;
//   cuda_ipc: CUDA_IPC_REGIONS with each slot's IPC handle and the stamp
//             page's read-only memfd.
// The server closes the connection afterwards. Errors: kInternal when a
// descriptor or handle cannot be made (the peer is sent ERROR), else the
// socket's error.
//
// Threads: start() on the publisher's thread; serve_connection() on any
// worker (the ring is only read).
#pragma once

#include <memory>
#include <string>

#include "net/socket.h"
#include "ring/slot_ring.h"
#include "transport/transport.h"

namespace weightsync::detail {

// `name` is "shm" or "cuda_ipc"; `host` this host's identity (non-empty).
std::unique_ptr<ServedTransport> make_local_server(const char* name, std::string host);

// The regions frame and descriptors for one authenticated connection.
Status serve_local_regions(const Socket& socket, const SlotRing& ring, int io_timeout_ms);

}  // namespace weightsync::detail
