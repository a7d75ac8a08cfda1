// The per-connection request loops run by PublisherServer after a successful
// handshake. Each returns when the peer says BYE, disconnects, misbehaves or
// the server stops; a Status other than OK/kConnectionLost is logged and
// counted by the caller. Every field from the wire is validated here.
#pragma once

#include <cstdint>

#include "publisher/server.h"
#include "wire/messages.h"

namespace weightsync::detail {

struct HandlerContext {
  const Socket* socket = nullptr;
  const ServedState* state = nullptr;
  ServerCounters* counters = nullptr;
  std::uint64_t session = 0;
  int io_timeout_ms = 10000;
  const std::atomic<bool>* stopping = nullptr;
};

// Control plane: layout, slot table, versions, leases.
Status serve_control(const HandlerContext& ctx);
// TCP data transport: READ requests answered from slot memory.
Status serve_tcp_data(const HandlerContext& ctx);
// Shared-memory transport: hands read-only slot and stamp descriptors to an
// authenticated subscriber on this host, then closes.
Status serve_shm(const HandlerContext& ctx);

// Sends ERROR(code, message) (best effort) and returns Status(code, message).
Status reply_error(const HandlerContext& ctx, ErrorCode code, const std::string& message);

}  // namespace weightsync::detail
