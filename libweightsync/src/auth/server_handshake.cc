// HandshakeResponder: HELLO -> CHALLENGE, AUTH -> verified, WELCOME.
#include "auth/server_handshake.h"

#include "auth/crypto.h"
#include "auth/handshake.h"
#include "common/printable.h"

namespace weightsync::detail {

Result<std::vector<std::uint8_t>> HandshakeResponder::on_hello(const Frame& frame) {
  if (hello_received_ || frame.type != MsgType::kHello) {
    return Status(ErrorCode::kProtocolError,
                  std::string("expected HELLO from the subscriber, got ") + to_string(frame.type));
  }
  auto hello = HelloMsg::decode(frame.payload);
  if (!hello.ok()) return hello.status();
  hello_ = std::move(*hello);
  hello_received_ = true;
  // Only control sessions carry the integrity layer (a data connection's
  // bytes are covered by the version tags).
  const bool asks = hello_.features != 0;
  if (asks && hello_.role != Role::kControl) {
    return Status(ErrorCode::kProtocolError, "only a control connection may ask for integrity");
  }
  if (hello_.role == Role::kControl && asks != integrity_) {
    return Status(ErrorCode::kInvalidConfig,
                  integrity_ ? "this publisher requires integrity on untrusted links: set WEIGHTSYNC_INTEGRITY=1 "
                               "(or SubscriberOptions::integrity) on the subscriber"
                             : "this publisher does not run with integrity: set WEIGHTSYNC_INTEGRITY=1 (or "
                               "PublisherOptions::integrity) on the publisher too");
  }
  challenge_.auth_required = !secret_.empty();
  Status s = random_bytes(challenge_.server_nonce.data(), challenge_.server_nonce.size());
  if (!s.ok()) return s;
  return challenge_.encode();
}

Status HandshakeResponder::on_auth(const Frame& frame) {
  if (!hello_received_ || authenticated_ || frame.type != MsgType::kAuth) {
    return Status(ErrorCode::kProtocolError,
                  std::string("expected AUTH from the subscriber, got ") + to_string(frame.type));
  }
  auto auth = AuthMsg::decode(frame.payload);
  if (!auth.ok()) return auth.status();
  if (challenge_.auth_required) {
    auto expected = hmac_sha256(secret_, handshake_transcript("client", hello_.role, hello_.session_id,
                                                              hello_.client_nonce, challenge_.server_nonce,
                                                              hello_.features));
    if (!expected.ok()) return expected.status();
    if (!constant_time_equal(*expected, auth->client_mac)) {
      return Status(ErrorCode::kAuthFailed,
                    "authentication failed: the subscriber's secret does not match the publisher's "
                    "(set the same WEIGHTSYNC_SECRET on both sides); client '" +
                        printable(hello_.client_name) + "'");
    }
  }
  authenticated_ = true;
  return Status();
}

Result<std::vector<std::uint8_t>> HandshakeResponder::welcome(std::uint64_t session_id) const {
  if (!authenticated_) return Status(ErrorCode::kInternal, "WELCOME before the peer authenticated");
  WelcomeMsg welcome;
  welcome.session_id = session_id;
  if (challenge_.auth_required) {
    // The server's proof covers the session id it hands out, so it cannot be swapped in transit.
    auto mac = hmac_sha256(secret_, handshake_transcript("server", hello_.role, session_id,
                                                         hello_.client_nonce, challenge_.server_nonce,
                                                         hello_.features));
    if (!mac.ok()) return mac.status();
    welcome.server_mac = *mac;
  }
  return welcome.encode();
}

}  // namespace weightsync::detail
