// The value of every element of every version, from global coordinates alone:
// element `index` (row-major flat index in the global tensor) of global tensor
// `tensor` (its id: position in model.h's global_tensors()) in version
// `version`. A checker recomputes it without knowing any plan or shard.
//
// Each value is a float32 in [1, 2): exponent bits of 1.0, 15 mantissa bits
// of a hash of (version, tensor, index) and, in the low 8 mantissa bits, the
// version's low byte, so a wrong element can be traced to the version it came
// from (origin_version). Never NaN or denormal: the bytes survive any copy.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>

namespace sharded {

inline std::uint32_t element_bits(std::uint64_t version, std::uint32_t tensor, std::uint64_t index) {
  std::uint64_t x = index + (static_cast<std::uint64_t>(tensor) << 40) + version * 0x9E3779B97F4A7C15ull;
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return 0x3F800000u | (static_cast<std::uint32_t>(x >> 49) << 8) |
         static_cast<std::uint32_t>(version & 0xFF);
}

inline float element_value(std::uint64_t version, std::uint32_t tensor, std::uint64_t index) {
  const std::uint32_t bits = element_bits(version, tensor, index);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The version within 128 of `near` whose value of this element is `bits`, or
// nullopt (not a value of any such version: garbage, zeros, a misplaced element).
inline std::optional<std::uint64_t> origin_version(std::uint32_t bits, std::uint64_t near,
                                                   std::uint32_t tensor, std::uint64_t index) {
  if ((bits & 0xFF800000u) != 0x3F800000u) return std::nullopt;
  const std::uint64_t low = bits & 0xFF;
  std::uint64_t candidate = near - ((near - low) & 0xFF);  // the newest version <= near with this low byte
  if (near - candidate > 128 || candidate == 0 || candidate > near) candidate += 256;
  if (candidate == 0 || element_bits(candidate, tensor, index) != bits) return std::nullopt;
  return candidate;
}

}  // namespace sharded
