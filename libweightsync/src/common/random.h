// Random bytes and identifiers from OpenSSL's CSPRNG (RAND_bytes): nonces,
// session, lease and reader ids, queue-pair numbers, tokens.
//
// Contract: any thread. Fails closed: kInternal when OpenSSL has no entropy
// (never zero or partial output); the caller must then refuse what needed it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weightsync/status.h"

namespace weightsync::detail {

Status random_bytes(void* out, std::size_t n);
// A random, non-zero 64-bit identifier (session and lease ids are not guessable).
Result<std::uint64_t> random_id();

}  // namespace weightsync::detail
