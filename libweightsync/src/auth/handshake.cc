// Mutual challenge-response authentication over HMAC-SHA256: the transcript
// both sides MAC, and the subscriber's side (the publisher's side is the
// HandshakeResponder state machine, auth/server_handshake.h).
#include "auth/handshake.h"

#include <type_traits>

#include "auth/crypto.h"
#include "common/byte_codec.h"
#include "common/random.h"
#include "wire/frame_io.h"

namespace weightsync::detail {

static_assert(std::is_same_v<Mac, MacField>, "AUTH and WELCOME carry an HMAC-SHA256 (auth/crypto.h: Mac)");

namespace {

constexpr const char* kServerPeer = "publisher";

// Every legitimate handshake message fits kMaxHandshakePayload: HELLO with the
// longest client name, and ERROR with the longest message (code, length, text).
static_assert(1 + 8 + kNonceBytes + 2 + kMaxClientName <= kMaxHandshakePayload, "HELLO must fit");
static_assert(1 + 2 + kMaxErrorMessage <= kMaxHandshakePayload, "ERROR must fit");

}  // namespace

std::vector<std::uint8_t> handshake_transcript(const char* label, Role role, std::uint64_t session_id,
                                               const Nonce& client_nonce, const Nonce& server_nonce,
                                               std::uint8_t features) {
  ByteWriter w;
  w.str16("weightsync/1");
  w.str16(label);
  w.u8(static_cast<std::uint8_t>(role));
  w.u64(session_id);
  w.bytes(client_nonce.data(), client_nonce.size());
  w.bytes(server_nonce.data(), server_nonce.size());
  if (features != 0) w.u8(features);  // as before features existed when there are none
  return w.take();
}

Result<std::uint64_t> client_handshake(const Socket& socket, const std::string& secret, Role role,
                                       std::uint64_t session_id, const std::string& client_name,
                                       Deadline deadline, std::uint8_t features, HandshakeOutcome* outcome) {
  HelloMsg hello;
  hello.role = role;
  hello.session_id = session_id;
  hello.client_name = client_name;
  hello.features = features;
  Status s = random_bytes(hello.client_nonce.data(), hello.client_nonce.size());
  if (!s.ok()) return s;
  s = write_frame(socket, MsgType::kHello, hello.encode(), deadline, kServerPeer);
  if (!s.ok()) return s;

  auto challenge_frame =
      read_expected(socket, MsgType::kChallenge, kMaxHandshakePayload, deadline, kServerPeer);
  if (!challenge_frame.ok()) return challenge_frame.status();
  auto challenge = ChallengeMsg::decode(challenge_frame->payload);
  if (!challenge.ok()) return challenge.status();
  if (challenge->auth_required && secret.empty()) {
    return Status(ErrorCode::kAuthFailed,
                  "the publisher requires authentication but this subscriber has no secret "
                  "(set WEIGHTSYNC_SECRET or SubscriberOptions::secret)");
  }
  if (features != 0 && !challenge->auth_required) {
    return Status(ErrorCode::kInvalidConfig, "integrity and encryption need a publisher with a secret; this one has none");
  }
  if (!challenge->auth_required && !secret.empty()) {
    return Status(ErrorCode::kAuthFailed,
                  "this subscriber has a secret but the publisher does not authenticate; refusing an "
                  "unauthenticated publisher (give the publisher the same WEIGHTSYNC_SECRET)");
  }

  AuthMsg auth;
  if (challenge->auth_required) {
    auto client_mac = hmac_sha256(secret, handshake_transcript("client", role, session_id, hello.client_nonce,
                                                               challenge->server_nonce, features));
    if (!client_mac.ok()) return client_mac.status();
    auth.client_mac = *client_mac;
  }
  s = write_frame(socket, MsgType::kAuth, auth.encode(), deadline, kServerPeer);
  if (!s.ok()) return s;

  auto welcome_frame = read_expected(socket, MsgType::kWelcome, kMaxHandshakePayload, deadline, kServerPeer);
  if (!welcome_frame.ok()) return welcome_frame.status();
  auto welcome = WelcomeMsg::decode(welcome_frame->payload);
  if (!welcome.ok()) return welcome.status();
  if (challenge->auth_required) {
    auto expected = hmac_sha256(secret, handshake_transcript("server", role, welcome->session_id,
                                                             hello.client_nonce, challenge->server_nonce, features));
    if (!expected.ok()) return expected.status();
    if (!constant_time_equal(*expected, welcome->server_mac)) {
      return Status(ErrorCode::kAuthFailed, "the publisher could not prove it knows the secret; refusing it");
    }
  }
  if (welcome->session_id == 0 || (role != Role::kControl && welcome->session_id != session_id)) {
    return Status(ErrorCode::kProtocolError, "publisher returned an invalid session id");
  }
  if (outcome != nullptr) {
    outcome->session_id = welcome->session_id;
    outcome->client_nonce = hello.client_nonce;
    outcome->server_nonce = challenge->server_nonce;
  }
  return welcome->session_id;
}

}  // namespace weightsync::detail
