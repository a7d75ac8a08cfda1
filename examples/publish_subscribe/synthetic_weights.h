// Synthetic "model" for the examples: a layout of float32 matrices whose bytes
// are a function of (version, word index), so a subscriber can check every
// byte it receives without a second copy of the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weightsync/weightsync.h"

namespace example {

inline std::uint32_t word_for(std::uint64_t version, std::uint64_t index) {
  std::uint64_t x = (version + 1) * 0x9E3779B97F4A7C15ull ^ (index * 0xC2B2AE3D27D4EB4Full);
  return static_cast<std::uint32_t>(x ^ (x >> 29));
}

// `tensors` square-ish float32 tensors adding up to about total_bytes.
inline weightsync::Result<weightsync::WeightLayout> make_layout(std::uint64_t total_bytes, int tensors) {
  std::vector<weightsync::TensorSpec> specs;
  const std::uint64_t per_tensor = std::max<std::uint64_t>(total_bytes / tensors / 4, 1);
  for (int i = 0; i < tensors; ++i) {
    specs.push_back({"layer" + std::to_string(i) + ".weight",
                     weightsync::DType::kFloat32,
                     {static_cast<std::int64_t>(per_tensor)}});
  }
  return weightsync::WeightLayout::build(std::move(specs));
}

// Fills a tensor's words; `first_word` is its offset in 4-byte words.
inline void fill(void* data, std::uint64_t bytes, std::uint64_t version, std::uint64_t first_word) {
  auto* words = static_cast<std::uint32_t*>(data);
  for (std::uint64_t i = 0; i < bytes / 4; ++i) words[i] = word_for(version, first_word + i);
}

// Index of the first wrong word, or -1.
inline std::int64_t first_mismatch(const void* data, std::uint64_t bytes, std::uint64_t version,
                                   std::uint64_t first_word) {
  const auto* words = static_cast<const std::uint32_t*>(data);
  for (std::uint64_t i = 0; i < bytes / 4; ++i) {
    if (words[i] != word_for(version, first_word + i)) return static_cast<std::int64_t>(i);
  }
  return -1;
}

}  // namespace example
