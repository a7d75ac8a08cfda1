// The delta codec (docs/slow_links.md, "Delta versions"): a version encoded
// against an older one as the XOR of the two images, byte-transposed by
// element width (byte k of every element together: the high bytes of an XOR
// of nearby values are mostly zero), then compressed with zstd.
//
// Contract
// - encode_delta() and decode_delta() are pure functions of their inputs; the
//   caller owns every buffer. Any thread; no shared state.
// - decode_delta() treats its input as hostile: a frame that is corrupt, does
//   not declare exactly `image_bytes`, or decompresses to anything else is a
//   kProtocolError; nothing is written past `image_bytes` of `xor_out`.
// - element_bytes is 1, 2, 4 or 8 (kInvalidArgument otherwise); a tail of
//   image_bytes % element_bytes bytes is kept in order after the transposed part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/status.h"

namespace weightsync::detail {

inline constexpr int kDefaultDeltaLevel = 1;  // zstd level: docs/slow_links.md, step 1

bool valid_element_bytes(std::size_t element_bytes) noexcept;

// The transposition width for a layout: the element size every tensor
// shares, else 1 (no transposition).
std::size_t delta_element_bytes(const WeightLayout& layout) noexcept;

// out = zstd(transpose(base XOR target)); scratch is resized to image_bytes.
Status encode_delta(const std::uint8_t* base, const std::uint8_t* target, std::size_t image_bytes,
                    std::size_t element_bytes, int level, std::vector<std::uint8_t>& scratch,
                    std::vector<std::uint8_t>& out);

// xor_out[0, image_bytes) = the XOR image (base XOR target) `compressed` encodes.
Status decode_delta(const std::uint8_t* compressed, std::size_t compressed_bytes, std::size_t image_bytes,
                    std::size_t element_bytes, std::vector<std::uint8_t>& scratch, std::uint8_t* xor_out);

// dst[i] ^= src[i] for i < bytes.
void xor_into(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) noexcept;

}  // namespace weightsync::detail
