// AES-128-GCM records in TLS 1.3's layout, with OpenSSL's EVP interface.
#include "net/record_layer.h"

#include <openssl/evp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace weightsync::detail {
namespace {

constexpr std::uint8_t kApplicationData = 0x17;

std::array<std::uint8_t, 12> nonce_of(const RecordKey& key, std::uint64_t sequence) {
  std::array<std::uint8_t, 12> nonce = key.iv;
  for (int i = 0; i < 8; ++i) nonce[11 - i] ^= static_cast<std::uint8_t>(sequence >> (8 * i));
  return nonce;
}

Status openssl_failed(const char* what) {
  return Status(ErrorCode::kInternal, std::string("OpenSSL failed to ") + what + " a record");
}

}  // namespace

struct RecordLayer::CipherContexts {
  EVP_CIPHER_CTX* encrypt = nullptr;
  EVP_CIPHER_CTX* decrypt = nullptr;
  ~CipherContexts() {
    EVP_CIPHER_CTX_free(encrypt);
    EVP_CIPHER_CTX_free(decrypt);
  }
};

Result<std::unique_ptr<RecordLayer>> RecordLayer::create(const RecordKey& send, const RecordKey& receive) {
  std::unique_ptr<RecordLayer> layer(new RecordLayer());
  layer->ctx_ = std::make_unique<CipherContexts>();
  layer->ctx_->encrypt = EVP_CIPHER_CTX_new();
  layer->ctx_->decrypt = EVP_CIPHER_CTX_new();
  if (layer->ctx_->encrypt == nullptr || layer->ctx_->decrypt == nullptr ||
      EVP_EncryptInit_ex(layer->ctx_->encrypt, EVP_aes_128_gcm(), nullptr, send.key.data(), nullptr) != 1 ||
      EVP_DecryptInit_ex(layer->ctx_->decrypt, EVP_aes_128_gcm(), nullptr, receive.key.data(), nullptr) != 1) {
    return Status(ErrorCode::kInternal, "OpenSSL cannot set up AES-128-GCM for an encrypted connection");
  }
  layer->send_ = send;
  layer->receive_ = receive;
  layer->raw_.resize(kRecordHeaderBytes + kMaxRecordBody);
  return layer;
}

RecordLayer::~RecordLayer() = default;

Status RecordLayer::seal(const iovec* iov, std::size_t count, std::size_t bytes, std::vector<std::uint8_t>& out) {
  EVP_CIPHER_CTX* ctx = ctx_->encrypt;
  std::size_t piece = 0, piece_used = 0;
  while (bytes > 0) {
    const std::size_t plain = std::min(bytes, kMaxRecordPlaintext);
    const std::size_t body = plain + 1 + kRecordTagBytes;
    const std::size_t start = out.size();
    out.resize(start + kRecordHeaderBytes + body);
    std::uint8_t* header = out.data() + start;
    header[0] = kApplicationData;
    header[1] = 0x03;
    header[2] = 0x03;
    header[3] = static_cast<std::uint8_t>(body >> 8);
    header[4] = static_cast<std::uint8_t>(body);
    const auto nonce = nonce_of(send_, send_seq_);
    std::uint8_t* cipher = header + kRecordHeaderBytes;
    int len = 0;
    if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) != 1 ||
        EVP_EncryptUpdate(ctx, nullptr, &len, header, kRecordHeaderBytes) != 1) {
      return openssl_failed("start");
    }
    std::size_t left = plain;
    while (left > 0) {
      if (piece >= count) return Status(ErrorCode::kInternal, "a record was sealed past the end of its data");
      const std::size_t take = std::min(left, iov[piece].iov_len - piece_used);
      if (take > 0 && EVP_EncryptUpdate(ctx, cipher, &len, static_cast<const std::uint8_t*>(iov[piece].iov_base) +
                                                              piece_used,
                                        static_cast<int>(take)) != 1) {
        return openssl_failed("encrypt");
      }
      cipher += len;
      left -= take;
      piece_used += take;
      if (piece_used == iov[piece].iov_len) {
        ++piece;
        piece_used = 0;
      }
    }
    const std::uint8_t type = kApplicationData;
    if (EVP_EncryptUpdate(ctx, cipher, &len, &type, 1) != 1) return openssl_failed("encrypt");
    cipher += len;
    if (EVP_EncryptFinal_ex(ctx, cipher, &len) != 1) return openssl_failed("finish");
    cipher += len;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kRecordTagBytes, cipher) != 1) {
      return openssl_failed("tag");
    }
    ++send_seq_;
    bytes -= plain;
  }
  return Status();
}

Result<std::size_t> RecordLayer::read_some(int fd, void* out, std::size_t bytes, const char* peer) {
  while (!has_pending()) {
    // Assemble one record: the header first, then exactly its body.
    std::size_t want = kRecordHeaderBytes;
    if (raw_filled_ >= kRecordHeaderBytes) want += (std::size_t{raw_[3]} << 8) | raw_[4];
    if (raw_filled_ < want) {
      const ssize_t n = ::recv(fd, raw_.data() + raw_filled_, want - raw_filled_, MSG_DONTWAIT);
      if (n == 0) {
        return Status(ErrorCode::kConnectionLost, std::string(peer) + (raw_filled_ > 0
                                                                           ? " closed the connection mid-record"
                                                                           : " closed the connection"));
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return std::size_t{0};
        return Status(ErrorCode::kConnectionLost,
                      std::string("connection to ") + peer + " failed: " + std::strerror(errno));
      }
      raw_filled_ += static_cast<std::size_t>(n);
      if (raw_filled_ == kRecordHeaderBytes) {
        const std::size_t body = (std::size_t{raw_[3]} << 8) | raw_[4];
        if (raw_[0] != kApplicationData || raw_[1] != 0x03 || raw_[2] != 0x03 || body < 1 + kRecordTagBytes ||
            body > kMaxRecordBody) {
          return Status(ErrorCode::kProtocolError,
                        std::string(peer) +
                            " sent bytes that are not an encrypted record (does it run with encryption? set "
                            "WEIGHTSYNC_ENCRYPTION the same on both sides)");
        }
      }
      continue;
    }
    // Decrypted into plain_ and handed out only once its tag verified:
    // never straight into the caller's buffer, which is the destination of
    // a pull (an engine's live parameters; issue 30, finding 10).
    auto opened = open_record(peer);
    raw_filled_ = 0;
    if (!opened.ok()) return opened;
  }
  const std::size_t take = std::min(bytes, plain_size_ - plain_used_);
  std::memcpy(out, plain_.data() + plain_used_, take);
  plain_used_ += take;
  return take;
}

Status RecordLayer::open_record(const char* peer) {
  EVP_CIPHER_CTX* ctx = ctx_->decrypt;
  const std::size_t body = raw_filled_ - kRecordHeaderBytes;
  const std::size_t cipher_bytes = body - kRecordTagBytes;
  const std::uint8_t* cipher = raw_.data() + kRecordHeaderBytes;
  plain_used_ = 0;
  plain_size_ = 0;
  if (plain_.size() < cipher_bytes) plain_.resize(kMaxRecordBody);  // once: no allocation or fill per record
  std::uint8_t* out = plain_.data();
  const auto nonce = nonce_of(receive_, receive_seq_);
  int len = 0, final_len = 0;
  if (EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) != 1 ||
      EVP_DecryptUpdate(ctx, nullptr, &len, raw_.data(), kRecordHeaderBytes) != 1 ||
      EVP_DecryptUpdate(ctx, out, &len, cipher, static_cast<int>(cipher_bytes)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kRecordTagBytes,
                          const_cast<std::uint8_t*>(cipher + cipher_bytes)) != 1) {
    plain_size_ = 0;
    return openssl_failed("decrypt");
  }
  // GCM's final step writes nothing; plain_ has room for cipher_bytes.
  std::uint8_t none[16];
  if (EVP_DecryptFinal_ex(ctx, none, &final_len) != 1) {
    plain_size_ = 0;  // nothing of a forged record is ever read out
    return Status(ErrorCode::kProtocolError,
                  std::string("a record from ") + peer +
                      " failed authentication: changed, replayed, reordered or forged in transit (or the "
                      "two sides do not share WEIGHTSYNC_SECRET)");
  }
  std::size_t size = static_cast<std::size_t>(len);
  while (size > 0 && out[size - 1] == 0) --size;  // TLS 1.3 padding
  if (size == 0 || out[size - 1] != kApplicationData) {
    plain_size_ = 0;
    return Status(ErrorCode::kProtocolError, std::string("a record from ") + peer + " is not application data");
  }
  ++receive_seq_;
  plain_size_ = size - 1;  // an empty record leaves nothing pending
  return Status();
}

}  // namespace weightsync::detail
