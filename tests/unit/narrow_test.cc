// Narrowing float32 to bfloat16/float16 and widening back (weightsync/narrow.h):
// every rounding checked against a reference written from the definition of
// round-to-nearest-even (the nearest representable value, found by binary
// search over the narrow type's ordered bit patterns; a tie goes to the even
// pattern), never from the code under test. Exhaustive over every narrow
// value's halfway points and over every bit pattern for the round trip.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "weightsync/narrow.h"

using namespace weightsync;

namespace {

struct Format {
  int mantissa_bits;
  int bias;
  std::uint32_t inf_bits;  // magnitude pattern of +inf
  std::uint32_t quiet_bit;
};
constexpr Format kBf16{7, 127, 0x7f80u, 0x40u};
constexpr Format kF16{10, 15, 0x7c00u, 0x200u};

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The magnitude a pattern stands for, from its fields; the all-ones exponent
// with a zero mantissa reads as the next power of two (the value that
// overflow rounds against).
double ref_value(const Format& fmt, std::uint32_t magnitude) {
  const std::uint32_t e = magnitude >> fmt.mantissa_bits;
  const std::uint32_t m = magnitude & ((1u << fmt.mantissa_bits) - 1);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - fmt.bias - fmt.mantissa_bits);
  return std::ldexp(static_cast<double>((1u << fmt.mantissa_bits) + m),
                    static_cast<int>(e) - fmt.bias - fmt.mantissa_bits);
}

// Round-to-nearest-even of a non-NaN float, from the definition.
std::uint16_t ref_round(const Format& fmt, float x) {
  const std::uint32_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= ref_value(fmt, fmt.inf_bits)) return static_cast<std::uint16_t>(sign | fmt.inf_bits);
  std::uint32_t lo = 0;
  std::uint32_t hi = fmt.inf_bits;  // value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (ref_value(fmt, mid) <= a) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const double below = a - ref_value(fmt, lo);
  const double above = ref_value(fmt, hi) - a;
  const std::uint32_t pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<std::uint16_t>(sign | pick);
}

std::uint16_t narrow_one(const Format& fmt, float x) {
  return &fmt == &kBf16 ? float_to_bfloat16(x) : float_to_float16(x);
}

// The bulk kernel over a vector (what images go through).
std::vector<std::uint16_t> narrow_all(const Format& fmt, const std::vector<float>& in) {
  std::vector<std::uint16_t> out(in.size());
  if (&fmt == &kBf16) {
    narrow_to_bfloat16(in.data(), out.data(), in.size());
  } else {
    narrow_to_float16(in.data(), out.data(), in.size());
  }
  return out;
}

std::vector<float> widen_all(const Format& fmt, const std::vector<std::uint16_t>& in) {
  std::vector<float> out(in.size());
  if (&fmt == &kBf16) {
    widen_bfloat16(in.data(), out.data(), in.size());
  } else {
    widen_float16(in.data(), out.data(), in.size());
  }
  return out;
}

const char* name_of(const Format& fmt) {
  return &fmt == &kBf16 ? "bfloat16" : "float16";
}

}  // namespace

TEST_CASE(
    "narrow: every halfway point between two narrow values rounds to the even one, its neighbours to the "
    "nearer",
    "[narrow]") {
  for (const Format* fmt : {&kBf16, &kF16}) {
    INFO(name_of(*fmt));
    std::vector<float> inputs;
    std::vector<std::uint16_t> expected;
    for (std::uint32_t b = 0; b < fmt->inf_bits; ++b) {  // every finite magnitude
      const double lo = ref_value(*fmt, b);
      const double hi = ref_value(*fmt, b + 1);
      const float mid = static_cast<float>((lo + hi) / 2);
      REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);  // exact in float32
      const std::uint32_t even = b % 2 == 0 ? b : b + 1;
      for (const std::uint32_t sign : {0u, 0x8000u}) {
        const float s = sign ? -1.0f : 1.0f;
        inputs.push_back(s * static_cast<float>(lo));  // exactly representable: itself
        expected.push_back(static_cast<std::uint16_t>(sign | b));
        inputs.push_back(s * mid);
        expected.push_back(static_cast<std::uint16_t>(sign | even));
        inputs.push_back(s * std::nextafter(mid, std::numeric_limits<float>::infinity()));
        expected.push_back(static_cast<std::uint16_t>(sign | (b + 1)));
        inputs.push_back(s * std::nextafter(mid, 0.0f));
        expected.push_back(static_cast<std::uint16_t>(sign | b));
      }
    }
    const std::vector<std::uint16_t> got = narrow_all(*fmt, inputs);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const bool ok = got[i] == expected[i] && narrow_one(*fmt, inputs[i]) == expected[i] &&
                      ref_round(*fmt, inputs[i]) == expected[i];
      if (!ok && ++wrong <= 5) {
        FAIL_CHECK("input bits 0x" << std::hex << bits_of(inputs[i]) << ": got 0x" << got[i] << " expected 0x"
                                   << expected[i] << " reference 0x" << ref_round(*fmt, inputs[i]));
      }
    }
    CHECK(wrong == 0);
    CHECK(inputs.size() == 8 * static_cast<std::size_t>(fmt->inf_bits));
  }
}

TEST_CASE("narrow: random float32 values round as the reference says, at any alignment", "[narrow]") {
  std::mt19937 rng(20261124);
  std::vector<float> inputs;
  // Uniform bit patterns (all exponents) and values near 1 (dense mantissas).
  std::uniform_real_distribution<float> near_one(-4.0f, 4.0f);
  for (int i = 0; i < 500000; ++i) {
    float f = float_of(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    inputs.push_back(f);
    inputs.push_back(near_one(rng));
  }
  for (const Format* fmt : {&kBf16, &kF16}) {
    INFO(name_of(*fmt));
    // Offset by one byte: the kernels take unaligned pointers.
    std::vector<unsigned char> src(inputs.size() * 4 + 1);
    std::vector<unsigned char> dst(inputs.size() * 2 + 1);
    std::memcpy(src.data() + 1, inputs.data(), inputs.size() * 4);
    if (fmt == &kBf16) {
      narrow_to_bfloat16(src.data() + 1, dst.data() + 1, inputs.size());
    } else {
      narrow_to_float16(src.data() + 1, dst.data() + 1, inputs.size());
    }
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      std::uint16_t got;
      std::memcpy(&got, dst.data() + 1 + 2 * i, 2);
      const std::uint16_t want = ref_round(*fmt, inputs[i]);
      if (got != want && ++wrong <= 5) {
        FAIL_CHECK("input bits 0x" << std::hex << bits_of(inputs[i]) << ": got 0x" << got << " expected 0x"
                                   << want);
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("narrow: NaN stays a quiet NaN with its sign, inf stays inf, -0 stays -0, subnormals round",
          "[narrow]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::uint32_t nan :
       {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffa00000u}) {
    INFO("NaN bits 0x" << std::hex << nan);
    const std::uint16_t b = float_to_bfloat16(float_of(nan));
    CHECK((b & 0x7f80u) == 0x7f80u);
    CHECK((b & 0x0040u) != 0);  // quiet
    CHECK((b & 0x8000u) == ((nan >> 16) & 0x8000u));
    const std::uint16_t h = float_to_float16(float_of(nan));
    CHECK((h & 0x7c00u) == 0x7c00u);
    CHECK((h & 0x0200u) != 0);  // quiet
    CHECK((h & 0x8000u) == ((nan >> 16) & 0x8000u));
    CHECK(std::isnan(bfloat16_to_float(b)));
    CHECK(std::isnan(float16_to_float(h)));
  }
  CHECK(float_to_bfloat16(inf) == 0x7f80u);
  CHECK(float_to_bfloat16(-inf) == 0xff80u);
  CHECK(float_to_float16(inf) == 0x7c00u);
  CHECK(float_to_float16(-inf) == 0xfc00u);
  CHECK(float_to_bfloat16(0.0f) == 0x0000u);
  CHECK(float_to_bfloat16(-0.0f) == 0x8000u);
  CHECK(float_to_float16(-0.0f) == 0x8000u);
  CHECK(bits_of(bfloat16_to_float(0x8000u)) == 0x80000000u);
  CHECK(bits_of(float16_to_float(0x8000u)) == 0x80000000u);
  // bfloat16 keeps float32's exponent range: float32 subnormals round in place.
  CHECK(float_to_bfloat16(float_of(0x00000001u)) == 0x0000u);
  CHECK(float_to_bfloat16(float_of(0x00008000u)) == 0x0000u);  // tie: to even (0)
  CHECK(float_to_bfloat16(float_of(0x00018000u)) == 0x0002u);  // tie between 1 and 2: to 2
  CHECK(float_to_bfloat16(float_of(0x80008001u)) == 0x8001u);
  CHECK(float_to_bfloat16(float_of(0x007fffffu)) == 0x0080u);  // up to the smallest normal
  CHECK(float_to_bfloat16(float_of(0x7f7fffffu)) == 0x7f80u);  // float32 max: past the tie, to inf
  CHECK(float_to_bfloat16(float_of(0x7f7f7fffu)) == 0x7f7fu);  // just below the tie: the bfloat16 max
  // float16 subnormals: steps of 2^-24.
  CHECK(float_to_float16(std::ldexp(1.0f, -24)) == 0x0001u);
  CHECK(float_to_float16(std::ldexp(1.0f, -25)) == 0x0000u);  // tie: to even (0)
  CHECK(float_to_float16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001u);
  CHECK(float_to_float16(std::ldexp(3.0f, -25)) == 0x0002u);     // tie between 1 and 2: to 2
  CHECK(float_to_float16(std::ldexp(1023.0f, -24)) == 0x03ffu);  // the largest subnormal
  CHECK(float_to_float16(std::ldexp(1023.5f, -24)) == 0x0400u);  // tie: to the smallest normal (even)
  CHECK(float_to_float16(std::ldexp(1.0f, -14)) == 0x0400u);
  CHECK(float_to_float16(-std::ldexp(1.0f, -26)) == 0x8000u);  // underflow keeps the sign
  CHECK(float_to_float16(1e-30f) == 0x0000u);
  CHECK(float_to_float16(float_of(0x00000001u)) == 0x0000u);  // a float32 subnormal
  CHECK(float16_to_float(0x0001u) == std::ldexp(1.0f, -24));
  CHECK(float16_to_float(0x03ffu) == std::ldexp(1023.0f, -24));
}

TEST_CASE("narrow: float16 overflows to inf from 65520 on, and 65504 is its largest value", "[narrow]") {
  CHECK(float_to_float16(65504.0f) == 0x7bffu);
  CHECK(float_to_float16(65519.996f) == 0x7bffu);
  CHECK(float_to_float16(65520.0f) == 0x7c00u);  // the tie with the next power of two: to inf (even)
  CHECK(float_to_float16(-65520.0f) == 0xfc00u);
  CHECK(float_to_float16(65536.0f) == 0x7c00u);
  CHECK(float_to_float16(1e10f) == 0x7c00u);
  CHECK(float_to_float16(-std::numeric_limits<float>::max()) == 0xfc00u);
  CHECK(float16_to_float(0x7bffu) == 65504.0f);
  CHECK(float16_to_float(0x7c00u) == std::numeric_limits<float>::infinity());
}

TEST_CASE("narrow: widen then narrow gives back every bfloat16 and every float16 bit pattern", "[narrow]") {
  std::vector<std::uint16_t> all(1u << 16);
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (const Format* fmt : {&kBf16, &kF16}) {
    INFO(name_of(*fmt));
    const std::vector<float> wide = widen_all(*fmt, all);
    const std::vector<std::uint16_t> back = narrow_all(*fmt, wide);
    std::size_t wrong = 0;
    for (std::uint32_t i = 0; i < all.size(); ++i) {
      const std::uint32_t magnitude = i & 0x7fffu;
      const bool nan = magnitude > fmt->inf_bits;
      bool ok = true;
      if (nan) {
        // NaN in, NaN out: same sign and payload, made quiet.
        ok = std::isnan(wide[i]) && back[i] == (i | fmt->quiet_bit);
      } else {
        // Widening is exact: the value the fields define (independent decode).
        const double value =
            magnitude == fmt->inf_bits ? std::numeric_limits<double>::infinity() : ref_value(*fmt, magnitude);
        ok = static_cast<double>(wide[i]) == ((i & 0x8000u) ? -value : value) &&
             std::signbit(wide[i]) == ((i & 0x8000u) != 0) && back[i] == i;
      }
      if (fmt == &kBf16) ok = ok && bits_of(wide[i]) == (i << 16);
      ok = ok &&
           bits_of(wide[i]) == bits_of(fmt == &kBf16 ? bfloat16_to_float(all[i]) : float16_to_float(all[i]));
      if (!ok && ++wrong <= 5) {
        FAIL_CHECK("pattern 0x" << std::hex << i << ": widened 0x" << bits_of(wide[i]) << ", narrowed back 0x"
                                << back[i]);
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("narrow: conversion speed, printed (not checked)", "[narrow][speed]") {
  const std::size_t n = 16u << 20;  // 64 MiB of float32
  std::vector<float> wide(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (float& f : wide) f = dist(rng);
  std::vector<std::uint16_t> narrow(n);
  std::vector<float> back(n);
  const auto rate = [&](auto&& run) {
    run();  // warm (page faults)
    const auto start = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(n) * 4 / s / 1e9;  // float32 GB/s
  };
  const double to_bf16 = rate([&] { narrow_to_bfloat16(wide.data(), narrow.data(), n); });
  const double from_bf16 = rate([&] { widen_bfloat16(narrow.data(), back.data(), n); });
  const double to_f16 = rate([&] { narrow_to_float16(wide.data(), narrow.data(), n); });
  const double from_f16 = rate([&] { widen_float16(narrow.data(), back.data(), n); });
  std::printf(
      "narrow speed (GB/s of float32, 64 MiB, one thread): to bf16 %.2f, bf16 to f32 %.2f, "
      "to f16 %.2f, f16 to f32 %.2f\n",
      to_bf16, from_bf16, to_f16, from_f16);
  CHECK(back[0] == float16_to_float(float_to_float16(wide[0])));
}

namespace {

WeightLayout mixed_layout(std::vector<std::int64_t> w_shape = {3, 5}, std::string last = "d") {
  auto built = WeightLayout::build({{"a", DType::kFloat32, {7}},
                                    {"b", DType::kInt32, {3}},
                                    {"c", DType::kFloat16, {5}},
                                    {"w", DType::kFloat32, w_shape},
                                    {last, DType::kInt64, {2}}},
                                   16);
  REQUIRE(built.ok());
  return std::move(built).value();
}

}  // namespace

TEST_CASE("narrow: narrowed_layout turns float32 tensors narrow and keeps the rest and the alignment",
          "[narrow]") {
  const WeightLayout wide = mixed_layout();
  for (const DType narrow : {DType::kBFloat16, DType::kFloat16}) {
    auto n = narrowed_layout(wide, narrow);
    REQUIRE(n.ok());
    REQUIRE(n->tensors().size() == wide.tensors().size());
    CHECK(n->alignment() == wide.alignment());
    CHECK(n->tensors()[0].spec.dtype == narrow);
    CHECK(n->tensors()[1].spec.dtype == DType::kInt32);
    CHECK(n->tensors()[2].spec.dtype == DType::kFloat16);
    CHECK(n->tensors()[3].spec.dtype == narrow);
    CHECK(n->tensors()[4].spec.dtype == DType::kInt64);
    for (std::size_t i = 0; i < wide.tensors().size(); ++i) {
      CHECK(n->tensors()[i].spec.name == wide.tensors()[i].spec.name);
      CHECK(n->tensors()[i].spec.shape == wide.tensors()[i].spec.shape);
    }
    CHECK(n->payload_bytes() == wide.payload_bytes() - (7 + 15) * 2);
    CHECK(check_widenable(*n, wide).ok());
    CHECK(check_widenable(wide, wide).ok());  // same dtypes: a copy
    const Status backwards = check_widenable(wide, *n);
    CHECK(backwards.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(backwards.message(), Catch::Contains("'a'"));
  }
  // Alignment 4 (the RL policy's layout: no padding) stays valid.
  auto packed = WeightLayout::build({{"x", DType::kFloat32, {3}}, {"y", DType::kFloat32, {2}}}, 4);
  REQUIRE(packed.ok());
  auto narrow_packed = narrowed_layout(*packed, DType::kBFloat16);
  REQUIRE(narrow_packed.ok());
  CHECK(narrow_packed->alignment() == 4);
  CHECK(narrow_packed->tensors()[1].offset == 8);
  for (const DType bad : {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kFloat8E4M3}) {
    auto refused = narrowed_layout(wide, bad);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(refused.status().message(), Catch::Contains(to_string(bad)));
  }
}

TEST_CASE("narrow: narrow_image and widen_image convert tensor by tensor and leave padding alone",
          "[narrow]") {
  const WeightLayout wide = mixed_layout();
  auto n = narrowed_layout(wide, DType::kBFloat16);
  REQUIRE(n.ok());
  std::vector<unsigned char> wide_image(wide.total_bytes(), 0);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (const TensorEntry& t : wide.tensors()) {
    for (std::uint64_t i = 0; i < t.bytes; ++i) wide_image[t.offset + i] = static_cast<unsigned char>(rng());
    if (t.spec.dtype == DType::kFloat32) {
      for (std::uint64_t i = 0; i < t.bytes / 4; ++i) {
        const float f = dist(rng);
        std::memcpy(&wide_image[t.offset + 4 * i], &f, 4);
      }
    }
  }
  std::vector<unsigned char> narrow_image_bytes(n->total_bytes(), 0xab);
  REQUIRE(narrow_image(wide, wide_image.data(), *n, narrow_image_bytes.data()).ok());
  std::vector<unsigned char> back(wide.total_bytes(), 0xcd);
  REQUIRE(widen_image(*n, narrow_image_bytes.data(), wide, back.data()).ok());
  for (std::size_t k = 0; k < wide.tensors().size(); ++k) {
    const TensorEntry& w = wide.tensors()[k];
    const TensorEntry& s = n->tensors()[k];
    INFO("tensor " << w.spec.name);
    if (w.spec.dtype != DType::kFloat32) {
      CHECK(std::memcmp(&narrow_image_bytes[s.offset], &wide_image[w.offset], w.bytes) == 0);
      CHECK(std::memcmp(&back[w.offset], &wide_image[w.offset], w.bytes) == 0);
      continue;
    }
    for (std::uint64_t i = 0; i < w.bytes / 4; ++i) {
      float f;
      std::memcpy(&f, &wide_image[w.offset + 4 * i], 4);
      std::uint16_t h;
      std::memcpy(&h, &narrow_image_bytes[s.offset + 2 * i], 2);
      CHECK(h == ref_round(kBf16, f));
      float g;
      std::memcpy(&g, &back[w.offset + 4 * i], 4);
      CHECK(bits_of(g) == static_cast<std::uint32_t>(h) << 16);
    }
  }
  // Padding bytes are not written.
  std::uint64_t end = 0;
  for (const TensorEntry& s : n->tensors()) {
    for (std::uint64_t i = end; i < s.offset; ++i) CHECK(narrow_image_bytes[i] == 0xab);
    end = s.offset + s.bytes;
  }
}

TEST_CASE("narrow: images of layouts that are not two forms of one model are refused, naming the tensor",
          "[narrow]") {
  const WeightLayout wide = mixed_layout();
  auto n = narrowed_layout(wide, DType::kFloat16);
  REQUIRE(n.ok());
  std::vector<unsigned char> a(1 << 12);
  std::vector<unsigned char> b(1 << 12);
  const auto refused = [&](const WeightLayout& narrow, const WeightLayout& wide_layout,
                           const std::string& says) {
    const Status narrowed = narrow_image(wide_layout, a.data(), narrow, b.data());
    CHECK(narrowed.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(narrowed.message(), Catch::Contains(says));
    const Status widened = widen_image(narrow, a.data(), wide_layout, b.data());
    CHECK(widened.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(widened.message(), Catch::Contains(says));
  };
  // Another shape of 'w'.
  auto other_shape = narrowed_layout(mixed_layout({5, 3}), DType::kFloat16);
  REQUIRE(other_shape.ok());
  refused(*other_shape, wide, "'w'");
  // Another name of the last tensor.
  auto other_name = narrowed_layout(mixed_layout({3, 5}, "e"), DType::kFloat16);
  REQUIRE(other_name.ok());
  refused(*other_name, wide, "'e'");
  // Another count.
  auto fewer = WeightLayout::build({{"a", DType::kFloat16, {7}}});
  REQUIRE(fewer.ok());
  refused(*fewer, wide, "1 tensors");
  // int32 on one side, bfloat16 on the other: only float32 narrows.
  auto wrong_dtype = WeightLayout::build({{"a", DType::kBFloat16, {7}},
                                          {"b", DType::kBFloat16, {3}},
                                          {"c", DType::kFloat16, {5}},
                                          {"w", DType::kBFloat16, {3, 5}},
                                          {"d", DType::kInt64, {2}}},
                                         16);
  REQUIRE(wrong_dtype.ok());
  refused(*wrong_dtype, wide, "'b'");
  // Null images.
  CHECK(narrow_image(wide, nullptr, *n, b.data()).code() == ErrorCode::kInvalidArgument);
  CHECK(widen_image(*n, a.data(), wide, nullptr).code() == ErrorCode::kInvalidArgument);
}
