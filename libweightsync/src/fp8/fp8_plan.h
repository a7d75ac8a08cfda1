// fp8/fp8_plan.h: how one fp8 wire layout maps onto one float32 (wide)
// layout, tensor by tensor, checked once; quantize_image(), dequantize_image()
// and the Fp8Publisher's converter run it.
//
// Contract
// - make_fp8_plan(fp8, wide) applies every rule of check_fp8_pair()
//   (weightsync/fp8.h) and returns kInvalidArgument naming the first tensor
//   that breaks one; a plan it returns holds only offsets and sizes inside
//   both layouts' regions.
// - run_quantize(): wide image -> fp8 image, checking `stop` (may be null)
//   between bands of 128 rows or chunks of 1 Mi elements; false when it
//   stopped early (the destination then holds part of the image).
//   run_dequantize(): fp8 image -> wide image; the caller checks the scales
//   first (check_fp8_scales).
// - Threads: none of their own; a plan is immutable and may be shared.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/status.h"

namespace weightsync::detail {

struct Fp8Step {
  enum class Kind : std::uint8_t { kCopy, kBFloat16, kFloat16, kE4M3 };
  Kind kind = Kind::kCopy;
  std::uint64_t wide_offset = 0;
  std::uint64_t fp8_offset = 0;
  std::uint64_t scale_offset = 0;  // kE4M3 only
  std::uint64_t bytes = 0;         // kCopy: bytes; otherwise unused
  std::int64_t rows = 0;           // numel = rows * cols
  std::int64_t cols = 0;
};

struct Fp8Plan {
  std::vector<Fp8Step> steps;
};

Result<Fp8Plan> make_fp8_plan(const WeightLayout& fp8, const WeightLayout& wide);
bool run_quantize(const Fp8Plan& plan, const void* wide_image, void* fp8_image, const std::atomic<bool>* stop);
void run_dequantize(const Fp8Plan& plan, const void* fp8_image, void* wide_image);

}  // namespace weightsync::detail
