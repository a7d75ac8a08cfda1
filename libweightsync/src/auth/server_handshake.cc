// HandshakeResponder: HELLO -> CHALLENGE, AUTH -> verified, WELCOME.
#include "auth/server_handshake.h"

#include "auth/crypto.h"
#include "auth/handshake.h"
#include "auth/integrity.h"
#include "common/printable.h"
#include "common/random.h"

namespace weightsync::detail {

Status HandshakeResponder::check_features() const {
  const std::uint8_t wanted = hello_features(hello_.role, integrity_, encryption_);
  const std::uint8_t asked = hello_.features;
  if (asked == wanted) return Status();
  if (hello_.role == Role::kShm || (asked & ~hello_features(hello_.role, true, true)) != 0) {
    return Status(ErrorCode::kProtocolError, std::string("a ") + to_string(hello_.role) +
                                                 " connection asked for features it cannot have");
  }
  const bool asks_encryption = (asked & kHelloEncryption) != 0;
  if (asks_encryption != encryption_) {
    return Status(ErrorCode::kInvalidConfig,
                  encryption_ ? "this publisher encrypts every connection: set WEIGHTSYNC_ENCRYPTION=1 (or "
                                "SubscriberOptions::encryption) on the subscriber"
                              : "this publisher does not encrypt: set WEIGHTSYNC_ENCRYPTION=1 (or "
                                "PublisherOptions::encryption) on the publisher too, or turn it off on the "
                                "subscriber");
  }
  return Status(ErrorCode::kInvalidConfig,
                integrity_ ? "this publisher requires integrity on untrusted links: set WEIGHTSYNC_INTEGRITY=1 "
                             "(or SubscriberOptions::integrity) on the subscriber"
                           : "this publisher does not run with integrity: set WEIGHTSYNC_INTEGRITY=1 (or "
                             "PublisherOptions::integrity) on the publisher too");
}

Result<std::vector<std::uint8_t>> HandshakeResponder::on_hello(const Frame& frame) {
  if (hello_received_ || frame.type != MsgType::kHello) {
    return Status(ErrorCode::kProtocolError,
                  std::string("expected HELLO from the subscriber, got ") + to_string(frame.type));
  }
  auto hello = HelloMsg::decode(frame.payload);
  if (!hello.ok()) return hello.status();
  hello_ = std::move(*hello);
  hello_received_ = true;
  // Control connections carry the integrity layer; encryption covers every
  // TCP connection; the local (same-host) socket carries neither.
  if (Status agreed = check_features(); !agreed.ok()) return agreed;
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
