// connect_and_authenticate(): a subscriber's way in: open a connection, run
// the client handshake, and when the publisher turns it away for capacity
// (ERROR(kBusy): too many connections authenticating, or max_connections
// reached) back off and try again, until `deadline`.
//
// Backoff: 10 ms, doubling to at most 250 ms, each with up to 50% random
// jitter so that many subscribers refused together do not return together.
// Errors: the last attempt's Status when the deadline passes (kBusy if the
// publisher was still full; its message says so), or at once any error
// other than kBusy (kAuthFailed, kConnectionLost, ...).
//
// Threads: any thread; `open` runs on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "auth/handshake.h"

namespace weightsync::detail {

struct AuthenticatedSocket {
  Socket socket;
  std::uint64_t session_id = 0;
  HandshakeOutcome outcome;  // the nonces, for the integrity layer's keys
};

// `features`: HELLO's feature bits (kHelloIntegrity on a control connection).
Result<AuthenticatedSocket> connect_and_authenticate(const std::function<Result<Socket>(Deadline)>& open,
                                                     const std::string& secret, Role role,
                                                     std::uint64_t session_id, const std::string& client_name,
                                                     Deadline deadline, std::uint8_t features = 0);

}  // namespace weightsync::detail
