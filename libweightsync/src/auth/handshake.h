// The connection handshake (docs/protocol.md, "Handshake"):
//   client HELLO -> server CHALLENGE -> client AUTH -> server WELCOME | ERROR.
// With a secret, both sides prove knowledge of it with HMAC-SHA256 over a
// transcript of both nonces, the role and the session id; the secret never
// travels. The server sends nothing but CHALLENGE before the client is
// authenticated, and a failed proof is answered with ERROR(kAuthFailed).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "net/socket.h"
#include "wire/messages.h"

namespace weightsync::detail {

struct ServerHandshake {
  Role role = Role::kControl;
  std::uint64_t session_id = 0;
  std::string client_name;
};

// `data_session_ok` says whether a data connection may join the control
// session it names. `new_session_id` is the id handed to a control connection;
// `control_session_authenticated` runs with it after the client proved the
// secret and before WELCOME is sent.
Result<ServerHandshake> server_handshake(
    const Socket& socket, const std::string& secret, Deadline deadline, std::uint64_t new_session_id,
    const std::function<bool(std::uint64_t)>& data_session_ok,
    const std::function<void(std::uint64_t)>& control_session_authenticated);

// Returns the session id. kAuthFailed when either side cannot prove the secret.
Result<std::uint64_t> client_handshake(const Socket& socket, const std::string& secret, Role role,
                                       std::uint64_t session_id, const std::string& client_name,
                                       Deadline deadline);

}  // namespace weightsync::detail
