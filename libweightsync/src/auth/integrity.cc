// Key derivation and frame tags of the integrity layer.
#include "auth/integrity.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "auth/crypto.h"
#include "common/byte_codec.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {

Result<Mac> tag_of(const Mac& key, std::uint64_t sequence, MsgType type, const std::uint8_t* payload,
                   std::size_t bytes) try {
  std::uint8_t head[10];
  for (int i = 0; i < 8; ++i) head[i] = static_cast<std::uint8_t>(sequence >> (8 * i));
  head[8] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(type));
  head[9] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(type) >> 8);
  HmacSha256 mac(key.data(), key.size());
  mac.update(head, sizeof(head));
  mac.update(payload, bytes);
  Mac out{};
  const auto full = mac.peek();
  std::copy(full.begin(), full.end(), out.begin());
  return out;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("a frame tag could not be computed: ") + e.what());
}

}  // namespace

Result<std::shared_ptr<const VersionKey>> derive_version_key(const std::string& secret) {
  if (secret.empty()) return Status(ErrorCode::kInvalidConfig, "integrity needs a secret (WEIGHTSYNC_SECRET)");
  ByteWriter w;
  w.str16("weightsync/1 version tags");
  auto key = hmac_sha256(secret, w.take());
  if (!key.ok()) return key.status();
  auto out = std::make_shared<VersionKey>();
  out->bytes = *key;
  return std::shared_ptr<const VersionKey>(std::move(out));
}

Result<SessionKeys> derive_session_keys(const std::string& secret, std::uint64_t session_id,
                                        const Nonce& client_nonce, const Nonce& server_nonce) {
  SessionKeys keys;
  for (int direction = 0; direction < 2; ++direction) {
    ByteWriter w;
    w.str16("weightsync/1 frame tags");
    w.str16(direction == 0 ? "to publisher" : "to subscriber");
    w.u64(session_id);
    w.bytes(client_nonce.data(), client_nonce.size());
    w.bytes(server_nonce.data(), server_nonce.size());
    auto key = hmac_sha256(secret, w.take());
    if (!key.ok()) return key.status();
    (direction == 0 ? keys.to_publisher : keys.to_subscriber) = *key;
  }
  return keys;
}

std::uint8_t hello_features(Role role, bool integrity, bool encryption) {
  if (role == Role::kControl) {
    return static_cast<std::uint8_t>((integrity || encryption ? kHelloIntegrity : 0) |
                                     (encryption ? kHelloEncryption : 0));
  }
  return role == Role::kData && encryption ? kHelloEncryption : std::uint8_t{0};
}

Result<RecordKeys> derive_record_keys(const std::string& secret, std::uint64_t session_id,
                                      const Nonce& client_nonce, const Nonce& server_nonce) {
  if (secret.empty()) return Status(ErrorCode::kInvalidConfig, "encryption needs a secret (WEIGHTSYNC_SECRET)");
  RecordKeys keys;
  for (int direction = 0; direction < 2; ++direction) {
    RecordKey& key = direction == 0 ? keys.to_publisher : keys.to_subscriber;
    for (int part = 0; part < 2; ++part) {
      ByteWriter w;
      w.str16(part == 0 ? "weightsync/1 record key" : "weightsync/1 record iv");
      w.str16(direction == 0 ? "to publisher" : "to subscriber");
      w.u64(session_id);
      w.bytes(client_nonce.data(), client_nonce.size());
      w.bytes(server_nonce.data(), server_nonce.size());
      auto mac = hmac_sha256(secret, w.take());
      if (!mac.ok()) return mac.status();
      if (part == 0) {
        std::copy_n(mac->begin(), key.key.size(), key.key.begin());
      } else {
        std::copy_n(mac->begin(), key.iv.size(), key.iv.begin());
      }
    }
  }
  return keys;
}

Status enable_encryption(Socket& socket, const std::string& secret, std::uint64_t session_id,
                         const Nonce& client_nonce, const Nonce& server_nonce, bool publisher_side) {
  auto keys = derive_record_keys(secret, session_id, client_nonce, server_nonce);
  if (!keys.ok()) return keys.status();
  auto records = publisher_side ? RecordLayer::create(keys->to_subscriber, keys->to_publisher)
                                : RecordLayer::create(keys->to_publisher, keys->to_subscriber);
  if (!records.ok()) return records.status();
  socket.enable_records(std::move(*records));
  return Status();
}

Status FrameSeal::seal(MsgType type, std::vector<std::uint8_t>& payload) {
  auto tag = tag_of(send_key_, sent_, type, payload.data(), payload.size());
  if (!tag.ok()) return tag.status();
  payload.insert(payload.end(), tag->begin(), tag->begin() + kFrameTagBytes);
  ++sent_;
  return Status();
}

Status FrameSeal::open(Frame& frame) {
  if (frame.payload.size() < kFrameTagBytes) {
    return Status(ErrorCode::kProtocolError, std::string("a ") + to_string(frame.type) + " frame has no integrity tag");
  }
  const std::size_t bytes = frame.payload.size() - kFrameTagBytes;
  auto tag = tag_of(receive_key_, received_, frame.type, frame.payload.data(), bytes);
  if (!tag.ok()) return tag.status();
  if (CRYPTO_memcmp(tag->data(), frame.payload.data() + bytes, kFrameTagBytes) != 0) {
    return Status(ErrorCode::kProtocolError,
                  std::string("a ") + to_string(frame.type) +
                      " frame failed its integrity tag: changed, replayed or reordered in transit");
  }
  frame.payload.resize(bytes);
  ++received_;
  return Status();
}

Status write_sealed(const Socket& socket, FrameSeal* seal, MsgType type, std::vector<std::uint8_t> payload,
                    Deadline deadline, const char* peer) {
  if (seal != nullptr) {
    if (Status s = seal->seal(type, payload); !s.ok()) return s;
  }
  return write_frame(socket, type, payload, deadline, peer);
}

Status reply_error_sealed(const Socket& socket, FrameSeal* seal, ErrorCode code, const std::string& message,
                          Deadline deadline, const char* peer) {
  (void)write_sealed(socket, seal, MsgType::kError, ErrorMsg{code, message}.encode(), deadline, peer);
  return Status(code, message);
}

Result<Frame> read_expected_sealed(const Socket& socket, FrameSeal* seal, MsgType expected,
                                   std::uint32_t max_payload, Deadline deadline, const char* peer) {
  const std::uint32_t limit = seal != nullptr ? max_payload + static_cast<std::uint32_t>(kFrameTagBytes) : max_payload;
  auto frame = read_frame(socket, limit, deadline, deadline, peer);
  if (!frame.ok()) return frame.status();
  if (seal != nullptr) {
    if (Status s = seal->open(*frame); !s.ok()) return s;
  }
  return expect_reply(std::move(*frame), expected, peer);
}

}  // namespace weightsync::detail
