// The integrity layer for untrusted links (docs/security.md, "Integrity";
// docs/protocol.md, "Integrity"), on for a session when the subscriber asks
// for it in HELLO and the publisher runs with it:
// - version tags: every version's checksum is HMAC-SHA256 under a key derived
//   from the shared secret, truncated to 64 bits, instead of xxHash3
//   (common/checksum.h, StreamHasher with a VersionKey);
// - sealed control frames: after the handshake every control frame carries a
//   16-byte HMAC-SHA256 tag over its direction's sequence number, its type and
//   its payload, under a key derived from the secret and this handshake's
//   nonces, so frames cannot be changed, dropped, replayed or reordered.
//
// - encryption (optional, implies the above): every byte of every TCP
//   connection after WELCOME in AES-128-GCM records (net/record_layer.h),
//   under keys derived from the secret and that connection's handshake.
//
// Contract: the derivations are pure; a FrameSeal is used by one thread at a
// time (the connection's owner); errors are kInternal (OpenSSL failed: fail
// closed) or, from open(), kProtocolError.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "auth/crypto.h"
#include "common/checksum.h"
#include "net/record_layer.h"
#include "net/socket.h"
#include "weightsync/status.h"
#include "wire/frame.h"
#include "wire/messages.h"

namespace weightsync::detail {

inline constexpr std::size_t kFrameTagBytes = 16;

// HELLO feature bits (HelloMsg::features).
inline constexpr std::uint8_t kHelloIntegrity = 1;
// Encryption (net/record_layer.h): a control connection asks for it with
// kHelloIntegrity (encryption implies integrity), a tcp data connection alone.
inline constexpr std::uint8_t kHelloEncryption = 2;

// The HELLO features a connection of `role` carries under these settings.
std::uint8_t hello_features(Role role, bool integrity, bool encryption);

// The key of every version tag, from the shared secret alone (so relays and
// every subscriber with the secret compute the same tags).
Result<std::shared_ptr<const VersionKey>> derive_version_key(const std::string& secret);

struct SessionKeys {
  Mac to_publisher{};
  Mac to_subscriber{};
};
// The control connection's frame keys, from the secret and this handshake.
Result<SessionKeys> derive_session_keys(const std::string& secret, std::uint64_t session_id,
                                        const Nonce& client_nonce, const Nonce& server_nonce);

struct RecordKeys {
  RecordKey to_publisher;
  RecordKey to_subscriber;
};
// One connection's record keys (encryption), from the secret and its own
// handshake: every connection, control or data, has its own.
Result<RecordKeys> derive_record_keys(const std::string& secret, std::uint64_t session_id,
                                      const Nonce& client_nonce, const Nonce& server_nonce);
// Turns encryption on for `socket` right after its handshake; `publisher_side`
// picks the direction of each key.
Status enable_encryption(Socket& socket, const std::string& secret, std::uint64_t session_id,
                         const Nonce& client_nonce, const Nonce& server_nonce, bool publisher_side);

class FrameSeal {
 public:
  FrameSeal(const Mac& send_key, const Mac& receive_key) : send_key_(send_key), receive_key_(receive_key) {}

  // Appends the tag of the next frame this side sends.
  Status seal(MsgType type, std::vector<std::uint8_t>& payload);
  // Checks and strips the tag of the next frame this side receives.
  Status open(Frame& frame);

 private:
  Mac send_key_;
  Mac receive_key_;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

// Frame I/O through an optional seal (nullptr: plain frames, as frame_io.h).
Status write_sealed(const Socket& socket, FrameSeal* seal, MsgType type, std::vector<std::uint8_t> payload,
                    Deadline deadline, const char* peer);
// Sends ERROR(code, message) (best effort) and returns Status(code, message).
Status reply_error_sealed(const Socket& socket, FrameSeal* seal, ErrorCode code, const std::string& message,
                          Deadline deadline, const char* peer);
// read_expected() with the frame opened first.
Result<Frame> read_expected_sealed(const Socket& socket, FrameSeal* seal, MsgType expected,
                                   std::uint32_t max_payload, Deadline deadline, const char* peer);

}  // namespace weightsync::detail
