// The connection handshake (docs/protocol.md, "Handshake"):
//   client HELLO -> server CHALLENGE -> client AUTH -> server WELCOME | ERROR.
// With a secret, both sides prove knowledge of it with HMAC-SHA256 over a
// transcript of both nonces, the role and the session id; the secret never
// travels. The server sends nothing but CHALLENGE before the client is
// authenticated, and a failed proof is answered with ERROR(kAuthFailed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "net/socket.h"
#include "wire/messages.h"

namespace weightsync::detail {

// The bytes both sides MAC: protocol name, `label` ("client" or "server"),
// role, session id, both nonces, and HELLO's feature bits when not zero.
std::vector<std::uint8_t> handshake_transcript(const char* label, Role role, std::uint64_t session_id,
                                               const Nonce& client_nonce, const Nonce& server_nonce,
                                               std::uint8_t features = 0);

// What a finished handshake leaves for the integrity layer's keys.
struct HandshakeOutcome {
  std::uint64_t session_id = 0;
  Nonce client_nonce{};
  Nonce server_nonce{};
};

// Returns the session id. kAuthFailed when either side cannot prove the
// secret. `features` go in HELLO (kHelloIntegrity needs a secret); `outcome`,
// when given, receives the nonces.
Result<std::uint64_t> client_handshake(const Socket& socket, const std::string& secret, Role role,
                                       std::uint64_t session_id, const std::string& client_name,
                                       Deadline deadline, std::uint8_t features = 0,
                                       HandshakeOutcome* outcome = nullptr);

}  // namespace weightsync::detail
