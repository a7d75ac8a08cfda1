// weightsync/fp8.h: fp8 (e4m3) weights in flight, DeepSeek-V3 style. The
// trainer keeps float32 weights; the publisher sends each large matrix as
// OCP FP8 E4M3FN in 128x128 blocks with one float32 scale per block, the
// scale tensor beside its weight, and every other tensor in bfloat16 or
// float32 by a per-tensor rule. A subscriber loads fp8 plus scales as they
// are (an fp8 engine) or dequantizes them into its own float32 layout.
//
// Contract
// - E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
//   0x7F/0xFF are NaN (the only NaNs); the largest finite is 448 (0x7E); the
//   smallest subnormal 2^-9. float_to_e4m3() rounds to nearest, ties to even
//   mantissa, subnormals included; it saturates: finite values beyond 448
//   and +-inf become +-448; NaN becomes 0x7F/0xFF by its sign; -0 stays -0
//   (0x80). e4m3_to_float() is exact (every code is a float32).
// - Blocks: a tensor of rank >= 2 is seen as rows x cols (rows: the product
//   of the leading dims, cols: the last dim), cut in kFp8BlockSize^2 blocks
//   from the top left, the last row and column of blocks partial when the
//   sizes are not multiples. Its scale tensor is float32 of shape
//   [ceil(rows/128), ceil(cols/128)], row-major. A 3-D expert tensor
//   [E, out, in] with out a multiple of 128 thus gets each expert's own
//   blocks, its scales the bytes of a grouped [E, out/128, ceil(in/128)];
//   with other `out` a block may span two experts. For a block:
//   amax = the largest |x| over its finite elements; scale = amax / 448 (in
//   float32) and q = float_to_e4m3(x / scale); a block with amax == 0 (all
//   zeros, or only inf/NaN) gets scale 1. inf saturates to +-448, i.e.
//   +-448*scale after dequantization; NaN stays NaN. Dequantization:
//   x' = e4m3_to_float(q) * scale (a zero block gives exact zeros). The scale
//   is the multiplier of dequantization, as DeepSeek-V3 checkpoints and vLLM
//   (`weight_scale_inv`, despite the name) define it.
// - Names: the scale tensor of "X" is "X_scale_inv" (so "...weight" has
//   "...weight_scale_inv", what vLLM and DeepSeek checkpoints load), placed
//   right after X in the layout.
// - Precision rule (Fp8Policy): a float32 tensor stays in higher precision
//   when its rank is < 2 (biases, norms: small_tensor_dtype) or its name
//   matches a keep rule (first match; glob: '*' any run, '?' one char, the
//   whole name); every other float32 tensor becomes fp8 plus scales; other
//   dtypes are kept as they are. Kept dtypes: kFloat32 or kBFloat16.
// - fp8_layout() turns a float32 layout into the fp8 wire layout (names,
//   order and alignment kept, scales inserted). kInvalidArgument for a kept
//   dtype that is neither float32 nor bfloat16, or a scale name that is
//   already a tensor's name.
// - check_fp8_pair(fp8, wide): whether `fp8` can be dequantized into `wide`:
//   every wide tensor present in fp8 by name with its shape; an e4m3 tensor
//   has its float32 "_scale_inv" tensor of the block shape and widens into
//   float32; bfloat16/float16 widens into float32; otherwise same dtype; no
//   tensor in fp8 that is neither a wide tensor nor a scale. Anything else
//   (a hostile or mismatched publisher) is kInvalidArgument naming the tensor.
// - check_fp8_scales(fp8, image): every scale of every e4m3 tensor is finite,
//   >= 0 and <= FLT_MAX/448 (so no dequantized value overflows); else
//   kInvalidArgument naming the tensor and block. An fp8 engine calls it on
//   each version it loads. dequantize_image() checks the pair and the scales
//   before it writes anything: on an error nothing is written. fp8 NaN codes
//   dequantize to NaN (the trainer had NaN there).
// - Kernels and image functions read and write through memcpy-sized loads
//   (any alignment), assume the default floating-point environment, and keep
//   padding bytes unwritten. No exception crosses these functions;
//   allocation failures are kInternal.
// - Fp8Publisher: a NarrowingPublisher whose converter quantizes: it owns a
//   Publisher over fp8_layout(wide, policy) (slot_memory must be kHost) and
//   one converter thread. publish() copies the float32 image into staging
//   (the only work on the caller's thread); the converter quantizes it into
//   a slot and commits. Newest wins, errors come back once by the next
//   publish() or flush(), threads and destruction exactly as
//   NarrowingPublisher's (weightsync/narrow.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/narrow.h"
#include "weightsync/options.h"
#include "weightsync/publisher.h"
#include "weightsync/status.h"

namespace weightsync {

inline constexpr std::int64_t kFp8BlockSize = 128;
inline constexpr float kE4M3Max = 448.0f;

// One value.
std::uint8_t float_to_e4m3(float value) noexcept;
float e4m3_to_float(std::uint8_t bits) noexcept;

// `count` elements, no scaling (dst must not overlap src).
void narrow_to_e4m3(const void* src_f32, void* dst_e4m3, std::size_t count) noexcept;
void widen_e4m3(const void* src_e4m3, void* dst_f32, std::size_t count) noexcept;

// A rows x cols float32 matrix to e4m3 plus fp8_scale_count(rows, cols)
// float32 scales (see the contract). Rows and cols must be >= 1.
void quantize_blocks_e4m3(const void* src_f32, std::int64_t rows, std::int64_t cols, void* dst_e4m3,
                          void* dst_scales) noexcept;
// The inverse; scales are used as given (check them first: check_fp8_scales).
void dequantize_blocks_e4m3(const void* src_e4m3, const void* scales, std::int64_t rows, std::int64_t cols,
                            void* dst_f32) noexcept;

// The scale tensor's shape for a tensor of `shape` (rank >= 2).
std::vector<std::int64_t> fp8_scale_shape(const std::vector<std::int64_t>& shape);
std::string fp8_scale_name(const std::string& name);

struct Fp8KeepRule {
  std::string pattern;                // glob over the whole name
  DType dtype = DType::kBFloat16;     // kBFloat16 or kFloat32
};

// The recipe's list: embeddings, norms, the MoE router/gate, the output head.
std::vector<Fp8KeepRule> default_fp8_keep_rules();

struct Fp8Policy {
  std::vector<Fp8KeepRule> keep = default_fp8_keep_rules();
  DType small_tensor_dtype = DType::kBFloat16;  // rank < 2: biases, norm weights, scalars
};

// True when `pattern` ('*', '?') matches all of `name`.
bool fp8_name_matches(const std::string& pattern, const std::string& name) noexcept;

Result<WeightLayout> fp8_layout(const WeightLayout& wide, const Fp8Policy& policy = {});
Status check_fp8_pair(const WeightLayout& fp8, const WeightLayout& wide);
Status check_fp8_scales(const WeightLayout& fp8, const void* fp8_image);

// Images are total_bytes() of their layout. quantize_image: `fp8` must be a
// layout check_fp8_pair accepts against `wide` (fp8_layout()'s is).
Status quantize_image(const WeightLayout& wide, const void* wide_image, const WeightLayout& fp8, void* fp8_image);
Status dequantize_image(const WeightLayout& fp8, const void* fp8_image, const WeightLayout& wide, void* wide_image);

class Fp8Publisher {
 public:
  static Result<std::unique_ptr<Fp8Publisher>> create(const WeightLayout& wide, const Fp8Policy& policy = {},
                                                      PublisherOptions options = {});
  ~Fp8Publisher();
  Fp8Publisher(const Fp8Publisher&) = delete;
  Fp8Publisher& operator=(const Fp8Publisher&) = delete;

  // `wide_image`: wide_layout().total_bytes() bytes; `version` greater than
  // every version handed over before (else kInvalidArgument).
  Result<NarrowHandoff> publish(std::uint64_t version, const void* wide_image, std::size_t bytes);
  Result<PublishResult> flush(std::chrono::milliseconds timeout = std::chrono::seconds(60));

  const WeightLayout& wide_layout() const noexcept;
  // The Publisher of the fp8 layout: address(), layout(), stats().
  Publisher& publisher() noexcept;
  NarrowingStats stats() const;

  class Impl;

 private:
  explicit Fp8Publisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightsync
