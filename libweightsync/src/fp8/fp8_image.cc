// Whole images: check_fp8_pair(), check_fp8_scales(), quantize_image() and
// dequantize_image() (weightsync/fp8.h has the contract), over the plan of
// fp8/fp8_plan.h.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "fp8/fp8_plan.h"
#include "weightsync/fp8.h"

namespace weightsync {
namespace {

// The largest scale whose dequantized values stay finite: 448 * scale <= FLT_MAX.
constexpr float kMaxScale = FLT_MAX / kE4M3Max;

Status check_scales_of(const TensorEntry& weight, const TensorEntry* scale, const unsigned char* image) {
  if (scale == nullptr || scale->spec.dtype != DType::kFloat32 ||
      scale->spec.shape != fp8_scale_shape(weight.spec.shape) || weight.spec.shape.size() < 2) {
    return Status(ErrorCode::kInvalidArgument, "fp8 tensor '" + weight.spec.name +
                                                   "' has no float32 scale tensor '" +
                                                   fp8_scale_name(weight.spec.name) + "' of its block shape");
  }
  const std::size_t count = scale->bytes / 4;
  for (std::size_t i = 0; i < count; ++i) {
    float s;
    std::memcpy(&s, image + scale->offset + 4 * i, 4);
    if (!(s >= 0.0f && s <= kMaxScale)) {  // false for NaN too
      const std::size_t per_row = static_cast<std::size_t>(scale->spec.shape[1]);
      return Status(ErrorCode::kInvalidArgument,
                    "fp8 tensor '" + weight.spec.name + "': the scale of block (" + std::to_string(i / per_row) +
                        ", " + std::to_string(i % per_row) + ") is " + std::to_string(s) +
                        ": a scale must be finite, >= 0 and <= FLT_MAX/448 (a corrupt or hostile publisher)");
    }
  }
  return Status();
}

}  // namespace

Status check_fp8_pair(const WeightLayout& fp8, const WeightLayout& wide) try {
  return detail::make_fp8_plan(fp8, wide).status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("check_fp8_pair: ") + e.what());
}

Status check_fp8_scales(const WeightLayout& fp8, const void* fp8_image) try {
  if (fp8_image == nullptr) return Status(ErrorCode::kInvalidArgument, "check_fp8_scales(): the image is null");
  const auto* image = static_cast<const unsigned char*>(fp8_image);
  for (const TensorEntry& t : fp8.tensors()) {
    if (t.spec.dtype != DType::kFloat8E4M3) continue;
    if (Status ok = check_scales_of(t, fp8.find(fp8_scale_name(t.spec.name)), image); !ok.ok()) return ok;
  }
  return Status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("check_fp8_scales: ") + e.what());
}

Status quantize_image(const WeightLayout& wide, const void* wide_image, const WeightLayout& fp8,
                      void* fp8_image) try {
  if (wide_image == nullptr || fp8_image == nullptr) {
    return Status(ErrorCode::kInvalidArgument, "quantize_image(): an image pointer is null");
  }
  auto plan = detail::make_fp8_plan(fp8, wide);
  if (!plan.ok()) return Status(plan.status().code(), "quantize_image(): " + plan.status().message());
  detail::run_quantize(plan.value(), wide_image, fp8_image, nullptr);
  return Status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("quantize_image: ") + e.what());
}

Status dequantize_image(const WeightLayout& fp8, const void* fp8_image, const WeightLayout& wide,
                        void* wide_image) try {
  if (wide_image == nullptr || fp8_image == nullptr) {
    return Status(ErrorCode::kInvalidArgument, "dequantize_image(): an image pointer is null");
  }
  auto plan = detail::make_fp8_plan(fp8, wide);
  if (!plan.ok()) return Status(plan.status().code(), "dequantize_image(): " + plan.status().message());
  if (Status scales = check_fp8_scales(fp8, fp8_image); !scales.ok()) {
    return Status(scales.code(), "dequantize_image(): " + scales.message() + "; nothing was written");
  }
  detail::run_dequantize(plan.value(), fp8_image, wide_image);
  return Status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("dequantize_image: ") + e.what());
}

}  // namespace weightsync
