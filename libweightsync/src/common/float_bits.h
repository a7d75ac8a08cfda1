// The bits of a float32 and back, for the conversion kernels (narrow/, fp8/)
// that round by integer arithmetic on those bits (memcpy: the library is
// C++17, without std::bit_cast; compilers turn it into a register move).
// Thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

namespace weightsync::detail {

inline std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float float_of(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace weightsync::detail
