// Version-specific byte patterns for the tests. Every 8-byte word of a
// version's image carries the version number in its upper half and the word's
// index in its lower half, so one scan proves both "bytes of exactly this
// version" (no mixing) and "in the right place" (bit-exact).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "weightsync/layout.h"

namespace wstest {

inline std::uint8_t pattern_byte(std::uint64_t version, std::uint64_t offset) {
  const std::uint64_t word = (version << 32) | ((offset / 8) & 0xffffffffu);
  return static_cast<std::uint8_t>(word >> (8 * (offset % 8)));
}

// Fills bytes [offset, offset + n) of a version's image.
inline void fill_pattern(void* dst, std::uint64_t n, std::uint64_t version, std::uint64_t offset) {
  auto* p = static_cast<std::uint8_t*>(dst);
  std::uint64_t i = 0;
  // Whole aligned words at once for speed.
  for (; i < n && (offset + i) % 8 != 0; ++i) p[i] = pattern_byte(version, offset + i);
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t word = (version << 32) | (((offset + i) / 8) & 0xffffffffu);
    std::memcpy(p + i, &word, 8);
  }
  for (; i < n; ++i) p[i] = pattern_byte(version, offset + i);
}

// Offset of the first byte that is not version's pattern, or -1.
inline std::int64_t find_mismatch(const void* src, std::uint64_t n, std::uint64_t version,
                                  std::uint64_t offset) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::uint64_t i = 0; i < n; ++i) {
    if ((offset + i) % 8 == 0 && i + 8 <= n) {
      const std::uint64_t expect = (version << 32) | (((offset + i) / 8) & 0xffffffffu);
      std::uint64_t got;
      std::memcpy(&got, p + i, 8);
      if (got == expect) {
        i += 7;
        continue;
      }
    }
    if (p[i] != pattern_byte(version, offset + i)) return static_cast<std::int64_t>(i);
  }
  return -1;
}

// A layout of `count` uint8 tensors summing to `total` bytes (last one takes the rest).
inline weightsync::WeightLayout bytes_layout(std::uint64_t total, int count = 1) {
  std::vector<weightsync::TensorSpec> specs;
  std::uint64_t left = total;
  for (int i = 0; i < count; ++i) {
    std::uint64_t n = (i == count - 1) ? left : std::max<std::uint64_t>(total / count, 1);
    left -= n;
    specs.push_back({"t" + std::to_string(i), weightsync::DType::kUInt8, {static_cast<std::int64_t>(n)}});
  }
  auto layout = weightsync::WeightLayout::build(std::move(specs));
  if (!layout.ok()) throw std::runtime_error(layout.status().to_string());
  return *layout;
}

}  // namespace wstest
