// Mutual challenge-response authentication over HMAC-SHA256.
#include "auth/handshake.h"

#include "auth/crypto.h"
#include "wire/byte_codec.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {

constexpr const char* kServerPeer = "publisher";
constexpr const char* kClientPeer = "subscriber";

std::vector<std::uint8_t> transcript(const char* label, Role role, std::uint64_t session_id,
                                     const Nonce& client_nonce, const Nonce& server_nonce) {
  ByteWriter w;
  w.str16("weightsync/1");
  w.str16(label);
  w.u8(static_cast<std::uint8_t>(role));
  w.u64(session_id);
  w.bytes(client_nonce.data(), client_nonce.size());
  w.bytes(server_nonce.data(), server_nonce.size());
  return w.take();
}

void send_error(const Socket& socket, ErrorCode code, const std::string& message, Deadline deadline) {
  (void)write_frame(socket, MsgType::kError, ErrorMsg{code, message}.encode(), deadline, kClientPeer);
}

}  // namespace

Result<ServerHandshake> server_handshake(
    const Socket& socket, const std::string& secret, Deadline deadline, std::uint64_t new_session_id,
    const std::function<bool(std::uint64_t)>& data_session_ok,
    const std::function<void(std::uint64_t)>& control_session_authenticated) {
  auto hello_frame = read_expected(socket, MsgType::kHello, kMaxRequestPayload, deadline, kClientPeer);
  if (!hello_frame.ok()) return hello_frame.status();
  auto hello = HelloMsg::decode(hello_frame->payload);
  if (!hello.ok()) return hello.status();

  ChallengeMsg challenge;
  challenge.auth_required = !secret.empty();
  Status s = random_bytes(challenge.server_nonce.data(), challenge.server_nonce.size());
  if (!s.ok()) return s;
  s = write_frame(socket, MsgType::kChallenge, challenge.encode(), deadline, kClientPeer);
  if (!s.ok()) return s;

  auto auth_frame = read_expected(socket, MsgType::kAuth, kMaxRequestPayload, deadline, kClientPeer);
  if (!auth_frame.ok()) return auth_frame.status();
  auto auth = AuthMsg::decode(auth_frame->payload);
  if (!auth.ok()) return auth.status();

  const std::uint64_t session_id = hello->role == Role::kControl ? new_session_id : hello->session_id;
  if (challenge.auth_required) {
    Mac expected = hmac_sha256(secret, transcript("client", hello->role, hello->session_id,
                                                  hello->client_nonce, challenge.server_nonce));
    if (!constant_time_equal(expected, auth->client_mac)) {
      std::string why =
          "authentication failed: the subscriber's secret does not match the publisher's "
          "(set the same WEIGHTSYNC_SECRET on both sides)";
      send_error(socket, ErrorCode::kAuthFailed, why, deadline);
      return Status(ErrorCode::kAuthFailed, why + "; client '" + hello->client_name + "'");
    }
  }
  if (hello->role != Role::kControl && !data_session_ok(hello->session_id)) {
    std::string why = "data connection names no live control session";
    send_error(socket, ErrorCode::kProtocolError, why, deadline);
    return Status(ErrorCode::kProtocolError, why);
  }

  if (hello->role == Role::kControl) control_session_authenticated(session_id);

  WelcomeMsg welcome;
  welcome.session_id = session_id;
  if (challenge.auth_required) {
    // The server's proof covers the session id it hands out, so it cannot be swapped in transit.
    welcome.server_mac = hmac_sha256(
        secret, transcript("server", hello->role, session_id, hello->client_nonce, challenge.server_nonce));
  }
  s = write_frame(socket, MsgType::kWelcome, welcome.encode(), deadline, kClientPeer);
  if (!s.ok()) return s;
  return ServerHandshake{hello->role, session_id, hello->client_name};
}

Result<std::uint64_t> client_handshake(const Socket& socket, const std::string& secret, Role role,
                                       std::uint64_t session_id, const std::string& client_name,
                                       Deadline deadline) {
  HelloMsg hello;
  hello.role = role;
  hello.session_id = session_id;
  hello.client_name = client_name;
  Status s = random_bytes(hello.client_nonce.data(), hello.client_nonce.size());
  if (!s.ok()) return s;
  s = write_frame(socket, MsgType::kHello, hello.encode(), deadline, kServerPeer);
  if (!s.ok()) return s;

  auto challenge_frame = read_expected(socket, MsgType::kChallenge, kMaxReplyPayload, deadline, kServerPeer);
  if (!challenge_frame.ok()) return challenge_frame.status();
  auto challenge = ChallengeMsg::decode(challenge_frame->payload);
  if (!challenge.ok()) return challenge.status();
  if (challenge->auth_required && secret.empty()) {
    return Status(ErrorCode::kAuthFailed,
                  "the publisher requires authentication but this subscriber has no secret "
                  "(set WEIGHTSYNC_SECRET or SubscriberOptions::secret)");
  }
  if (!challenge->auth_required && !secret.empty()) {
    return Status(ErrorCode::kAuthFailed,
                  "this subscriber has a secret but the publisher does not authenticate; refusing an "
                  "unauthenticated publisher (give the publisher the same WEIGHTSYNC_SECRET)");
  }

  AuthMsg auth;
  if (challenge->auth_required) {
    auth.client_mac = hmac_sha256(
        secret, transcript("client", role, session_id, hello.client_nonce, challenge->server_nonce));
  }
  s = write_frame(socket, MsgType::kAuth, auth.encode(), deadline, kServerPeer);
  if (!s.ok()) return s;

  auto welcome_frame = read_expected(socket, MsgType::kWelcome, kMaxReplyPayload, deadline, kServerPeer);
  if (!welcome_frame.ok()) return welcome_frame.status();
  auto welcome = WelcomeMsg::decode(welcome_frame->payload);
  if (!welcome.ok()) return welcome.status();
  if (challenge->auth_required) {
    Mac expected = hmac_sha256(
        secret, transcript("server", role, welcome->session_id, hello.client_nonce, challenge->server_nonce));
    if (!constant_time_equal(expected, welcome->server_mac)) {
      return Status(ErrorCode::kAuthFailed, "the publisher could not prove it knows the secret; refusing it");
    }
  }
  if (welcome->session_id == 0 || (role != Role::kControl && welcome->session_id != session_id)) {
    return Status(ErrorCode::kProtocolError, "publisher returned an invalid session id");
  }
  return welcome->session_id;
}

}  // namespace weightsync::detail
