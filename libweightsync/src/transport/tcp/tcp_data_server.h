// TCP data transport, publisher side: one READ request answered from slot
// memory (docs/protocol.md, "TCP data"). The caller (publisher/server.h)
// has authenticated the connection and joined it to its control session.
//
// Bounds: every range lies inside the slot and all ranges together ask for
// at most one slot's worth of bytes, checked before a byte is sent; an
// out-of-range request is refused with ERROR(kInvalidArgument) and the
// connection closes. A revoked or rewritten lease is answered with
// ERROR(kVersionRevoked) and the connection stays. Writes are bounded by
// progress: each wait for buffer space by io_timeout_ms.
//
// Threads: one call at a time per socket; any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "net/socket.h"
#include "ring/slot_ring.h"

namespace weightsync::detail {

// OK: the request was answered (or refused in a way the peer can use) and the
// connection stays; any other Status: close it.
Status serve_tcp_read(const Socket& socket, SlotRing& ring, std::uint64_t session,
                      const std::vector<std::uint8_t>& request, int io_timeout_ms,
                      std::atomic<std::uint64_t>* bytes_served);

}  // namespace weightsync::detail
