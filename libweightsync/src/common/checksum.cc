// StreamHasher over libxxhash's XXH3 streaming API or OpenSSL's HMAC-SHA256.
#include "common/checksum.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include "weightsync/layout.h"

namespace weightsync::detail {
namespace {

EVP_MAC* hmac_algorithm() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);  // never freed: process lifetime
  if (mac == nullptr) throw std::runtime_error("OpenSSL has no HMAC (EVP_MAC_fetch failed)");
  return mac;
}

}  // namespace

HmacSha256::HmacSha256(const std::uint8_t* key, std::size_t key_bytes) : key_bytes_(std::min(key_bytes, key_.size())) {
  std::memcpy(key_.data(), key, key_bytes_);
  ctx_ = EVP_MAC_CTX_new(hmac_algorithm());
  if (ctx_ == nullptr) throw std::bad_alloc();
  reset();
}

HmacSha256::~HmacSha256() {
  EVP_MAC_CTX_free(ctx_);
}

void HmacSha256::reset() {
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(ctx_, key_.data(), key_bytes_, params) != 1) {
    throw std::runtime_error("OpenSSL could not start HMAC-SHA256");
  }
}

void HmacSha256::update(const void* data, std::size_t bytes) {
  if (bytes > 0 && EVP_MAC_update(ctx_, static_cast<const unsigned char*>(data), bytes) != 1) {
    throw std::runtime_error("OpenSSL HMAC-SHA256 update failed");
  }
}

std::array<std::uint8_t, 32> HmacSha256::peek() const {
  std::array<std::uint8_t, 32> out{};
  EVP_MAC_CTX* copy = EVP_MAC_CTX_dup(ctx_);
  std::size_t len = 0;
  const bool ok = copy != nullptr && EVP_MAC_final(copy, out.data(), &len, out.size()) == 1 && len == out.size();
  EVP_MAC_CTX_free(copy);
  if (!ok) throw std::runtime_error("OpenSSL HMAC-SHA256 final failed");
  return out;
}

StreamHasher::StreamHasher() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();  // caught at the library boundary
  reset();
}

StreamHasher::StreamHasher(std::shared_ptr<const VersionKey> key) : StreamHasher() {
  if (key) hmac_ = std::make_unique<HmacSha256>(key->bytes.data(), key->bytes.size());
}

StreamHasher::~StreamHasher() {
  XXH3_freeState(state_);
}

void StreamHasher::reset() {
  if (hmac_) {
    hmac_->reset();
    return;
  }
  XXH3_64bits_reset(state_);
}

void StreamHasher::update(const void* data, std::size_t bytes) {
  if (hmac_) {
    hmac_->update(data, bytes);
    return;
  }
  XXH3_64bits_update(state_, data, bytes);
}

std::uint64_t StreamHasher::digest() const {
  if (hmac_) {
    const auto mac = hmac_->peek();
    std::uint64_t tag = 0;
    for (int i = 7; i >= 0; --i) tag = (tag << 8) | mac[static_cast<std::size_t>(i)];
    return tag;
  }
  return XXH3_64bits_digest(state_);
}

std::uint64_t version_checksum(const WeightLayout& layout, const void* image,
                               const std::shared_ptr<const VersionKey>& key) {
  StreamHasher hasher(key);
  const auto* base = static_cast<const std::uint8_t*>(image);
  for (const auto& t : layout.tensors()) hasher.update(base + t.offset, t.bytes);
  return hasher.digest();
}

}  // namespace weightsync::detail
