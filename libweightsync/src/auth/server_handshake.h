// HandshakeResponder: the publisher's side of the handshake (docs/protocol.md,
// "Handshake") as a state machine the event loop drives one frame at a time,
// so that no thread ever waits on an unauthenticated peer:
//   on_hello(HELLO)  -> the CHALLENGE payload to send
//   on_auth(AUTH)    -> OK once the peer proved the secret (or none is set)
//   welcome(session) -> the WELCOME payload, after the caller admitted it
// Errors: kProtocolError for a malformed or out-of-order message,
// kAuthFailed for a wrong proof, kInternal when the MAC cannot be computed
// (fails closed). Messages that quote the peer's name escape it first.
//
// Threads: one owner at a time. The secret is copied in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wire/frame.h"
#include "wire/messages.h"

namespace weightsync::detail {

class HandshakeResponder {
 public:
  // integrity: the publisher runs with the integrity layer; its control
  // sessions must ask for it in HELLO, and no session may ask without it.
  // encryption (implies integrity): every control and tcp data connection
  // must ask for it, and none may without it.
  HandshakeResponder(std::string secret, bool integrity = false, bool encryption = false)
      : secret_(std::move(secret)), integrity_(integrity || encryption), encryption_(encryption) {}

  Result<std::vector<std::uint8_t>> on_hello(const Frame& frame);
  Status on_auth(const Frame& frame);
  Result<std::vector<std::uint8_t>> welcome(std::uint64_t session_id) const;

  bool hello_received() const noexcept { return hello_received_; }
  Role role() const noexcept { return hello_.role; }
  // For a data or local connection: the control session it asks to join.
  std::uint64_t claimed_session() const noexcept { return hello_.session_id; }
  const std::string& client_name() const noexcept { return hello_.client_name; }
  std::uint8_t features() const noexcept { return hello_.features; }
  const Nonce& client_nonce() const noexcept { return hello_.client_nonce; }
  const Nonce& server_nonce() const noexcept { return challenge_.server_nonce; }

 private:
  // The HELLO's features against this publisher's settings.
  Status check_features() const;

  std::string secret_;
  bool integrity_ = false;
  bool encryption_ = false;
  HelloMsg hello_;
  ChallengeMsg challenge_;
  bool hello_received_ = false;
  bool authenticated_ = false;
};

}  // namespace weightsync::detail
