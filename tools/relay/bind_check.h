// bind_check.h: whether a TCP address can be bound now, so a port in use is
// reported at start with the flag that named it, before any connection.
//
// Contract: binds and closes a socket (SO_REUSEADDR, as the servers do);
// port 0 always passes. Returns kInvalidConfig naming `flag` and the
// errno text ("Address already in use: pick another port or stop the process
// that holds it"). Any thread; no exceptions. A check, not a reservation:
// another process may take the port between this call and the real bind.
#pragma once

#include <cstdint>
#include <string>

#include "weightsync/status.h"

namespace wsrelay {

weightsync::Status check_bindable(const std::string& ipv4, std::uint16_t port, const std::string& flag);

}  // namespace wsrelay
