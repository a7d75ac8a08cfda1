// The e4m3 kernels: one value each way, bulk conversion, and 128x128 block
// quantization with float32 scales (weightsync/fp8.h has the contract).
// Encoding is branch-free integer arithmetic on the float32 bits (selects,
// so the loops vectorize; libweightsync/CMakeLists.txt gives this file the
// flags that let GCC do it); decoding is a 256-entry table.
#include <algorithm>
#include <array>
#include <cstring>

#include "common/float_bits.h"
#include "weightsync/fp8.h"

// GCC on x86-64 compiles the quantizing loops three times (AVX-512, AVX2,
// SSE2) and picks one at load time by the CPU (an ifunc): 1.7 GB/s with
// SSE2 only, 3.0 with AVX2, 4.0 with AVX-512 on the development machine
// (docs/perf/formats-fp8.md). Elsewhere, one baseline build; also under the
// sanitizers: an ifunc resolver runs while the dynamic loader relocates,
// before the sanitizer runtime is up, and TSan's instrumented resolver
// crashes there (GCC defines __SANITIZE_THREAD__ / __SANITIZE_ADDRESS__).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define WS_FP8_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define WS_FP8_CLONES
#endif

namespace weightsync {
namespace {

using detail::bits_of;
using detail::float_of;

constexpr std::int32_t kInfBits = 0x7f800000;
constexpr std::int32_t kMaxBits = 0x43e00000;        // 448.0f
constexpr std::int32_t kMinNormalBits = 0x3c800000;  // 2^-6
constexpr float kSubnormalMagic = 16384.0f;          // 2^14: its ulp is 2^-9, the e4m3 subnormal step

// float32 bits -> e4m3 bits. Magnitudes are clamped to 448 first (this
// saturates finite overflow and inf). Normal results (|x| >= 2^-6): rebias
// the exponent (127 -> 7) and round the 20 dropped bits to nearest even by
// adding 0x7ffff plus the lowest kept bit; a carry moves into the exponent as
// it should and cannot pass 448, the clamp. Subnormal results: adding 2^14
// leaves |x| rounded to a multiple of 2^-9 (by the FPU's own round to
// nearest even) in the low mantissa bits, 0..8 (8 is 2^-6, the smallest
// normal's code). Signed compares: the magnitude is below 2^31.
inline std::uint8_t e4m3_from_bits(std::uint32_t u) {
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::int32_t raw = static_cast<std::int32_t>(u & 0x7fffffffu);
  const std::int32_t a = raw < kMaxBits ? raw : kMaxBits;
  const std::uint32_t ua = static_cast<std::uint32_t>(a);
  const std::uint32_t normal = (ua - (120u << 23) + 0x7ffffu + ((ua >> 20) & 1u)) >> 20;
  const std::uint32_t subnormal = bits_of(float_of(ua) + kSubnormalMagic) - bits_of(kSubnormalMagic);
  std::uint32_t out = a < kMinNormalBits ? subnormal : normal;
  out = raw > kInfBits ? 0x7fu : out;
  return static_cast<std::uint8_t>(sign | out);
}

// e4m3 bits -> float32, exact.
float e4m3_decode(std::uint32_t b) {
  const std::uint32_t sign = (b & 0x80u) << 24;
  const std::uint32_t e = (b >> 3) & 0xfu;
  const std::uint32_t m = b & 0x7u;
  if (e == 15 && m == 7) return float_of(sign | 0x7fc00000u);
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) / 512.0f));
  return float_of(sign | ((e + 120u) << 23) | (m << 20));
}

const std::array<float, 256>& decode_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (std::uint32_t b = 0; b < 256; ++b) t[b] = e4m3_decode(b);
    return t;
  }();
  return table;
}

// The largest finite |x| of `count` floats as float32 bits (0 when none).
inline std::int32_t amax_bits(const unsigned char* src, std::size_t count) {
  std::int32_t m = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t u;
    std::memcpy(&u, src + 4 * i, 4);
    std::int32_t a = static_cast<std::int32_t>(u & 0x7fffffffu);
    a = a < kInfBits ? a : 0;
    m = a > m ? a : m;
  }
  return m;
}

inline void quantize_row(const unsigned char* src, float scale, unsigned char* dst, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    float x;
    std::memcpy(&x, src + 4 * i, 4);
    dst[i] = e4m3_from_bits(bits_of(x / scale));
  }
}

inline void dequantize_row(const unsigned char* src, float scale, const float* table, unsigned char* dst,
                           std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const float x = table[src[i]] * scale;
    std::memcpy(dst + 4 * i, &x, 4);
  }
}

}  // namespace

std::uint8_t float_to_e4m3(float value) noexcept {
  return e4m3_from_bits(bits_of(value));
}

float e4m3_to_float(std::uint8_t bits) noexcept {
  return decode_table()[bits];
}

WS_FP8_CLONES void narrow_to_e4m3(const void* src_f32, void* dst_e4m3, std::size_t count) noexcept {
  const auto* __restrict src = static_cast<const unsigned char*>(src_f32);
  auto* __restrict dst = static_cast<unsigned char*>(dst_e4m3);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t u;
    std::memcpy(&u, src + 4 * i, 4);
    dst[i] = e4m3_from_bits(u);
  }
}

void widen_e4m3(const void* src_e4m3, void* dst_f32, std::size_t count) noexcept {
  dequantize_row(static_cast<const unsigned char*>(src_e4m3), 1.0f, decode_table().data(),
                 static_cast<unsigned char*>(dst_f32), count);
}

// Band by band (128 rows), in chunks of up to kChunkBlocks column blocks:
// one pass over the chunk's rows for the blocks' amax (row segments of up to
// 8 KiB read in order, which the prefetcher follows; a pass down one
// 128-column block at a time strides a page per row and ran at 0.6 GB/s),
// then one pass quantizing the same rows while they are still in cache.
WS_FP8_CLONES void quantize_blocks_e4m3(const void* src_f32, std::int64_t rows, std::int64_t cols, void* dst_e4m3,
                          void* dst_scales) noexcept {
  constexpr std::int64_t kChunkBlocks = 16;
  const auto* src = static_cast<const unsigned char*>(src_f32);
  auto* dst = static_cast<unsigned char*>(dst_e4m3);
  auto* scales = static_cast<unsigned char*>(dst_scales);
  const auto ncols = static_cast<std::size_t>(cols);
  const std::int64_t blocks_per_row = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  for (std::int64_t r0 = 0; r0 < rows; r0 += kFp8BlockSize) {
    const std::int64_t r1 = std::min(rows, r0 + kFp8BlockSize);
    for (std::int64_t b0 = 0; b0 < blocks_per_row; b0 += kChunkBlocks) {
      const std::int64_t nb = std::min(kChunkBlocks, blocks_per_row - b0);
      std::int32_t amax[kChunkBlocks] = {};
      float scale[kChunkBlocks];
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t b = 0; b < nb; ++b) {
          const std::int64_t c0 = (b0 + b) * kFp8BlockSize;
          const auto width = static_cast<std::size_t>(std::min(cols, c0 + kFp8BlockSize) - c0);
          const std::size_t at = static_cast<std::size_t>(r) * ncols + static_cast<std::size_t>(c0);
          amax[b] = std::max(amax[b], amax_bits(src + 4 * at, width));
        }
      }
      for (std::int64_t b = 0; b < nb; ++b) {
        const std::int32_t m = amax[b];
        scale[b] = m == 0 ? 1.0f : float_of(static_cast<std::uint32_t>(m)) / kE4M3Max;
        const auto s = static_cast<std::size_t>((r0 / kFp8BlockSize) * blocks_per_row + b0 + b);
        std::memcpy(scales + 4 * s, &scale[b], 4);
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t b = 0; b < nb; ++b) {
          const std::int64_t c0 = (b0 + b) * kFp8BlockSize;
          const auto width = static_cast<std::size_t>(std::min(cols, c0 + kFp8BlockSize) - c0);
          const std::size_t at = static_cast<std::size_t>(r) * ncols + static_cast<std::size_t>(c0);
          quantize_row(src + 4 * at, scale[b], dst + at, width);
        }
      }
    }
  }
}

void dequantize_blocks_e4m3(const void* src_e4m3, const void* scales_f32, std::int64_t rows, std::int64_t cols,
                            void* dst_f32) noexcept {
  const auto* src = static_cast<const unsigned char*>(src_e4m3);
  const auto* scales = static_cast<const unsigned char*>(scales_f32);
  auto* dst = static_cast<unsigned char*>(dst_f32);
  const float* table = decode_table().data();
  const auto ncols = static_cast<std::size_t>(cols);
  const std::int64_t blocks_per_row = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t scale_row = (r / kFp8BlockSize) * blocks_per_row;
    for (std::int64_t c0 = 0, b = 0; c0 < cols; c0 += kFp8BlockSize, ++b) {
      float scale;
      std::memcpy(&scale, scales + 4 * static_cast<std::size_t>(scale_row + b), 4);
      const auto width = static_cast<std::size_t>(std::min(cols, c0 + kFp8BlockSize) - c0);
      const std::size_t at = static_cast<std::size_t>(r) * ncols + static_cast<std::size_t>(c0);
      dequantize_row(src + at, scale, table, dst + 4 * at, width);
    }
  }
}

}  // namespace weightsync
