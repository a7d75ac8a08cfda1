// zorplex/keys.h: the multi_step kind's keys.
//
// Contract
// - make_key(word, seed) is "ZK_" followed by the first 6 hex digits,
//   upper-case, of MD5("<word>_<seed>") (the seed in decimal, with a '-' when
//   negative, as Python's f-string writes it). For seed 42, apple -> ZK_6368CC.
// - It fails (an Error, never an exception) only if OpenSSL cannot compute
//   MD5, e.g. a FIPS-only provider configuration.
// - Thread-safe (OpenSSL's one-shot EVP_Digest keeps no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "zorplex/result.h"

namespace zorplex {

constexpr std::string_view kKeyPrefix = "ZK_";

Result<std::string> make_key(std::string_view word, std::int64_t seed);

}  // namespace zorplex
