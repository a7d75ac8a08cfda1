// Thin wrappers over OpenSSL: HMAC-SHA256, constant-time compare (random
// bytes and ids: common/random.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weightsync/status.h"

namespace weightsync::detail {

// An HMAC-SHA256 value: the handshake's proofs (wire/messages.h carries them
// as MacField, the same type) and the integrity layer's keys.
inline constexpr std::size_t kMacBytes = 32;
using Mac = std::array<std::uint8_t, kMacBytes>;

// HMAC-SHA256 of `message` under `key`. Fails closed: kInternal when OpenSSL
// cannot compute it (never a zero or partial MAC); the caller must then
// abort the handshake.
Result<Mac> hmac_sha256(const std::string& key, const std::vector<std::uint8_t>& message);
bool constant_time_equal(const Mac& a, const Mac& b);

}  // namespace weightsync::detail
