// Streaming checksums over the tensors of a version, in layout order and
// without padding, so a contiguous and a scatter destination hash the same.
// Two kinds: xxHash3-64 (the default: catches accidental corruption), or,
// with a VersionKey (the integrity layer, auth/integrity.h), a version tag:
// HMAC-SHA256 under that key, its first 8 bytes read little-endian (catches
// deliberate changes by anyone without the secret).
//
// Threads: one owner at a time. OpenSSL failures (none expected: HMAC-SHA256
// is always there) throw std::runtime_error, caught at the library boundary.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

struct XXH3_state_s;
struct evp_mac_ctx_st;

namespace weightsync {
class WeightLayout;
}  // namespace weightsync

namespace weightsync::detail {

struct VersionKey {
  std::array<std::uint8_t, 32> bytes{};
};

// Streaming HMAC-SHA256 (OpenSSL EVP_MAC).
class HmacSha256 {
 public:
  HmacSha256(const std::uint8_t* key, std::size_t key_bytes);
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;

  void reset();
  void update(const void* data, std::size_t bytes);
  // The MAC of everything so far; the stream may go on.
  std::array<std::uint8_t, 32> peek() const;

 private:
  evp_mac_ctx_st* ctx_ = nullptr;
  std::array<std::uint8_t, 64> key_{};
  std::size_t key_bytes_ = 0;
};

class StreamHasher {
 public:
  StreamHasher();
  // nullptr: xxHash3-64; else the version tag under `key`.
  explicit StreamHasher(std::shared_ptr<const VersionKey> key);
  ~StreamHasher();
  StreamHasher(const StreamHasher&) = delete;
  StreamHasher& operator=(const StreamHasher&) = delete;

  void reset();
  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;
  bool keyed() const noexcept { return hmac_ != nullptr; }

 private:
  XXH3_state_s* state_ = nullptr;
  std::unique_ptr<HmacSha256> hmac_;
};

// The checksum (with a key: the version tag) of a whole version whose image
// (a slot, or a copy of one) starts at `image`: its tensors in layout order,
// padding excluded. What the publisher serves for each version (publisher.cc)
// and what each delta link carries (delta/delta_store.cc).
std::uint64_t version_checksum(const WeightLayout& layout, const void* image,
                               const std::shared_ptr<const VersionKey>& key);

}  // namespace weightsync::detail
