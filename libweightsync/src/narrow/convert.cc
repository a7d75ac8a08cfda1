// Narrowing and widening: the per-value kernels (round to nearest even,
// branch-free so the loops vectorize), narrowed_layout(), check_widenable()
// and whole-image conversion (narrow/image_convert.h).
#include <algorithm>
#include <cstring>
#include <string>

#include "common/float_bits.h"
#include "narrow/image_convert.h"
#include "weightsync/narrow.h"

namespace weightsync {
namespace {

using detail::bits_of;
using detail::float_of;

// float32 bits -> bfloat16 bits. Adding 0x7fff plus the lowest kept bit and
// truncating rounds to nearest, ties to even (and carries into the exponent,
// up to inf, where it should).
inline std::uint16_t bf16_from_bits(std::uint32_t u) {
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// float32 bits -> float16 bits (F. Giesen's float_to_half_fast3_rtne, as
// selects). Normal results: rebias the exponent and round the 13 dropped bits
// to nearest even; a carry out of the top gives 0x7c00 (inf) for
// |x| >= 65520. Subnormal results (|x| < 2^-14): adding 0.5f leaves |x|
// rounded to a multiple of 2^-24 (the float16 subnormal step) in the low
// mantissa bits, by the FPU's own round-to-nearest-even.
inline std::uint16_t f16_from_bits(std::uint32_t u) {
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  const std::uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const std::uint32_t subnormal = bits_of(float_of(a) + float_of(126u << 23)) - (126u << 23);
  const std::uint32_t special = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : 0x7c00u;
  std::uint32_t out = a < (113u << 23) ? subnormal : normal;
  out = a >= (143u << 23) ? special : out;
  return static_cast<std::uint16_t>(sign | out);
}

// float16 bits -> float32 bits, exact (F. Giesen's half_to_float, as selects).
inline std::uint32_t f32_bits_from_f16(std::uint32_t h) {
  constexpr std::uint32_t kShiftedExp = 0x7c00u << 13;
  const std::uint32_t shifted = (h & 0x7fffu) << 13;
  const std::uint32_t exp = shifted & kShiftedExp;
  const std::uint32_t normal = shifted + (112u << 23);
  const std::uint32_t inf_nan = normal + (112u << 23);
  // Zero and subnormals: as a float with exponent 2^-14, minus 2^-14.
  const std::uint32_t subnormal = bits_of(float_of(normal + (1u << 23)) - float_of(113u << 23));
  std::uint32_t out = exp == kShiftedExp ? inf_nan : normal;
  out = exp == 0 ? subnormal : out;
  return out | ((h & 0x8000u) << 16);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

bool narrowable(DType dtype) {
  return dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

// Elements [first, first + count) of one tensor from `src` to `dst`.
void convert_elements(DType from, const unsigned char* src, DType to, unsigned char* dst, std::size_t first,
                      std::size_t count) {
  const std::size_t from_size = dtype_size(from);
  const std::size_t to_size = dtype_size(to);
  src += first * from_size;
  dst += first * to_size;
  if (from == to) {
    std::memcpy(dst, src, count * from_size);
  } else if (from == DType::kFloat32 && to == DType::kBFloat16) {
    narrow_to_bfloat16(src, dst, count);
  } else if (from == DType::kFloat32 && to == DType::kFloat16) {
    narrow_to_float16(src, dst, count);
  } else if (from == DType::kBFloat16 && to == DType::kFloat32) {
    widen_bfloat16(src, dst, count);
  } else if (from == DType::kFloat16 && to == DType::kFloat32) {
    widen_float16(src, dst, count);
  }
}

}  // namespace

std::uint16_t float_to_bfloat16(float value) noexcept {
  return bf16_from_bits(bits_of(value));
}

std::uint16_t float_to_float16(float value) noexcept {
  return f16_from_bits(bits_of(value));
}

float bfloat16_to_float(std::uint16_t bits) noexcept {
  return float_of(static_cast<std::uint32_t>(bits) << 16);
}

float float16_to_float(std::uint16_t bits) noexcept {
  return float_of(f32_bits_from_f16(bits));
}

void narrow_to_bfloat16(const void* src_f32, void* dst_bf16, std::size_t count) noexcept {
  const auto* __restrict src = static_cast<const unsigned char*>(src_f32);
  auto* __restrict dst = static_cast<unsigned char*>(dst_bf16);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t u;
    std::memcpy(&u, src + 4 * i, 4);
    const std::uint16_t h = bf16_from_bits(u);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void narrow_to_float16(const void* src_f32, void* dst_f16, std::size_t count) noexcept {
  const auto* __restrict src = static_cast<const unsigned char*>(src_f32);
  auto* __restrict dst = static_cast<unsigned char*>(dst_f16);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t u;
    std::memcpy(&u, src + 4 * i, 4);
    const std::uint16_t h = f16_from_bits(u);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void widen_bfloat16(const void* src_bf16, void* dst_f32, std::size_t count) noexcept {
  const auto* __restrict src = static_cast<const unsigned char*>(src_bf16);
  auto* __restrict dst = static_cast<unsigned char*>(dst_f32);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    std::memcpy(dst + 4 * i, &u, 4);
  }
}

void widen_float16(const void* src_f16, void* dst_f32, std::size_t count) noexcept {
  const auto* __restrict src = static_cast<const unsigned char*>(src_f16);
  auto* __restrict dst = static_cast<unsigned char*>(dst_f32);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const std::uint32_t u = f32_bits_from_f16(h);
    std::memcpy(dst + 4 * i, &u, 4);
  }
}

Result<WeightLayout> narrowed_layout(const WeightLayout& wide, DType narrow) try {
  if (!narrowable(narrow)) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string("narrowed_layout(): the narrow dtype must be bfloat16 "
                              "or float16, not ") +
                      to_string(narrow));
  }
  std::vector<TensorSpec> specs;
  specs.reserve(wide.tensors().size());
  for (const TensorEntry& t : wide.tensors()) {
    TensorSpec spec = t.spec;
    if (spec.dtype == DType::kFloat32) spec.dtype = narrow;
    specs.push_back(std::move(spec));
  }
  return WeightLayout::build(std::move(specs), wide.alignment());
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("narrowed_layout: ") + e.what());
}

Status check_widenable(const WeightLayout& narrow, const WeightLayout& wide) try {
  const auto& n = narrow.tensors();
  const auto& w = wide.tensors();
  if (n.size() != w.size()) {
    return Status(ErrorCode::kInvalidArgument, "the narrow layout has " + std::to_string(n.size()) +
                                                   " tensors and the wide one " + std::to_string(w.size()) +
                                                   ": they are not two forms of one model");
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    const TensorSpec& a = n[i].spec;
    const TensorSpec& b = w[i].spec;
    if (a.name != b.name) {
      return Status(ErrorCode::kInvalidArgument, "tensor #" + std::to_string(i) + " is '" + a.name +
                                                     "' in the narrow layout and '" + b.name +
                                                     "' in the wide one");
    }
    if (a.shape != b.shape) {
      return Status(ErrorCode::kInvalidArgument, "tensor '" + a.name + "' has shape " + shape_text(a.shape) +
                                                     " in the narrow layout and " + shape_text(b.shape) +
                                                     " in the wide one");
    }
    if (a.dtype != b.dtype && !(narrowable(a.dtype) && b.dtype == DType::kFloat32)) {
      return Status(ErrorCode::kInvalidArgument,
                    "tensor '" + a.name + "' is " + to_string(a.dtype) + " in the narrow layout and " +
                        to_string(b.dtype) +
                        " in the wide one: only float32 narrows (to bfloat16 or float16)");
    }
  }
  return Status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("check_widenable: ") + e.what());
}

namespace detail {

bool convert_image(const WeightLayout& from, const void* from_image, const WeightLayout& to, void* to_image,
                   const std::atomic<bool>* stop) {
  const auto* src = static_cast<const unsigned char*>(from_image);
  auto* dst = static_cast<unsigned char*>(to_image);
  for (std::size_t i = 0; i < from.tensors().size(); ++i) {
    const TensorEntry& a = from.tensors()[i];
    const TensorEntry& b = to.tensors()[i];
    const std::size_t numel = a.bytes / dtype_size(a.spec.dtype);
    for (std::size_t first = 0; first < numel; first += kConvertChunkElements) {
      if (stop != nullptr && stop->load(std::memory_order_relaxed)) return false;
      const std::size_t count = std::min(kConvertChunkElements, numel - first);
      convert_elements(a.spec.dtype, src + a.offset, b.spec.dtype, dst + b.offset, first, count);
    }
  }
  return true;
}

}  // namespace detail

Status narrow_image(const WeightLayout& wide, const void* wide_image, const WeightLayout& narrow,
                    void* narrow_image) try {
  if (wide_image == nullptr || narrow_image == nullptr) {
    return Status(ErrorCode::kInvalidArgument, "narrow_image(): an image pointer is null");
  }
  if (Status fits = check_widenable(narrow, wide); !fits.ok()) {
    return Status(fits.code(), "narrow_image(): " + fits.message());
  }
  detail::convert_image(wide, wide_image, narrow, narrow_image, nullptr);
  return Status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("narrow_image: ") + e.what());
}

Status widen_image(const WeightLayout& narrow, const void* narrow_image, const WeightLayout& wide,
                   void* wide_image) try {
  if (wide_image == nullptr || narrow_image == nullptr) {
    return Status(ErrorCode::kInvalidArgument, "widen_image(): an image pointer is null");
  }
  if (Status fits = check_widenable(narrow, wide); !fits.ok()) {
    return Status(fits.code(), "widen_image(): " + fits.message());
  }
  detail::convert_image(narrow, narrow_image, wide, wide_image, nullptr);
  return Status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("widen_image: ") + e.what());
}

}  // namespace weightsync
