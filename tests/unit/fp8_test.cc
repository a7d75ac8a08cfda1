// e4m3 kernels (weightsync/fp8.h) against a reference written from the OCP
// FP8 definition (E4M3FN: bias 7, no infinities, S.1111.111 the only NaN):
// decoding by formula, sign * 2^(e-7) * (1 + m/8) or sign * 2^-6 * m/8,
// encoding by searching the 126 positive finite codes for the nearest, a tie
// going to the even mantissa, and saturating. Never from the code under test.
// Block quantization against a plain per-block loop over the reference.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "weightsync/fp8.h"

using namespace weightsync;

namespace {

float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The OCP definition: value of a code (NaN for S.1111.111).
double ref_decode(std::uint8_t b) {
  const int e = (b >> 3) & 0xf;
  const int m = b & 0x7;
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m / 8.0, -6);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

// Round to nearest, ties to even mantissa, saturating at 448.
std::uint8_t ref_encode(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7e;
  std::uint8_t best = 0;
  double best_err = a;
  for (std::uint8_t c = 1; c <= 0x7e; ++c) {
    const double err = std::fabs(ref_decode(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | best;
}

// Block quantization by the contract, one block at a time.
void ref_quantize(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, std::vector<std::uint8_t>& q,
                  std::vector<float>& scales) {
  const std::int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  q.assign(x.size(), 0);
  scales.assign(static_cast<std::size_t>(br * bc), 0.0f);
  for (std::int64_t i = 0; i < br; ++i) {
    for (std::int64_t j = 0; j < bc; ++j) {
      float amax = 0.0f;
      for (std::int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (std::int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c) {
          const float v = std::fabs(x[r * cols + c]);
          if (std::isfinite(v) && v > amax) amax = v;
        }
      const float scale = amax == 0.0f ? 1.0f : amax / 448.0f;
      scales[i * bc + j] = scale;
      for (std::int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (std::int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c)
          q[r * cols + c] = ref_encode(x[r * cols + c] / scale);
    }
  }
}

}  // namespace

TEST_CASE("fp8: every one of the 256 e4m3 codes decodes as the OCP definition says", "[fp8]") {
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const double want = ref_decode(static_cast<std::uint8_t>(b));
    const float got = e4m3_to_float(static_cast<std::uint8_t>(b));
    INFO("code 0x" << std::hex << b);
    if (std::isnan(want)) {
      ++nans;
      CHECK(std::isnan(got));
      CHECK(std::signbit(got) == ((b & 0x80) != 0));
    } else {
      CHECK(static_cast<double>(got) == want);
      CHECK(std::signbit(got) == ((b & 0x80) != 0));  // -0 included
    }
  }
  CHECK(nans == 2);
  CHECK(e4m3_to_float(0x7e) == 448.0f);
  CHECK(e4m3_to_float(0x01) == std::ldexp(1.0f, -9));
  CHECK(e4m3_to_float(0x08) == std::ldexp(1.0f, -6));
}

TEST_CASE("fp8: every e4m3 code round-trips, and the bulk kernels agree with the scalar ones", "[fp8]") {
  std::vector<float> wide(256);
  std::vector<std::uint8_t> codes(256), back(256);
  for (int b = 0; b < 256; ++b) codes[b] = static_cast<std::uint8_t>(b);
  widen_e4m3(codes.data(), wide.data(), 256);
  narrow_to_e4m3(wide.data(), back.data(), 256);
  for (int b = 0; b < 256; ++b) {
    INFO("code 0x" << std::hex << b);
    CHECK(bits_of(wide[b]) == bits_of(e4m3_to_float(codes[b])));
    CHECK(float_to_e4m3(e4m3_to_float(codes[b])) == b);
    CHECK(back[b] == b);
  }
}

TEST_CASE("fp8: values halfway between neighbours round to the even mantissa, and just off it to the nearest",
          "[fp8]") {
  for (int b = 0; b < 0x7e; ++b) {
    const double lo = ref_decode(static_cast<std::uint8_t>(b));
    const double hi = ref_decode(static_cast<std::uint8_t>(b + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 5 significant bits at most
    REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);
    const int even = (b % 2 == 0) ? b : b + 1;
    INFO("between 0x" << std::hex << b << " and 0x" << b + 1);
    CHECK(float_to_e4m3(mid) == even);
    CHECK(float_to_e4m3(-mid) == (0x80 | even));
    CHECK(float_to_e4m3(std::nextafter(mid, 0.0f)) == b);
    CHECK(float_to_e4m3(std::nextafter(mid, 1000.0f)) == b + 1);
  }
}

TEST_CASE("fp8: saturation, NaN, signed zeros and subnormals", "[fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (float big : {448.0f, 449.0f, 464.0f, 480.0f, 1e30f, FLT_MAX, inf}) {
    INFO(big);
    CHECK(float_to_e4m3(big) == 0x7e);
    CHECK(float_to_e4m3(-big) == 0xfe);
  }
  CHECK(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(float_to_e4m3(-std::numeric_limits<float>::quiet_NaN()) == 0xff);
  CHECK(float_to_e4m3(std::numeric_limits<float>::signaling_NaN()) == 0x7f);
  CHECK(float_to_e4m3(float_of(0x7f800001u)) == 0x7f);  // the smallest NaN payload
  CHECK(float_to_e4m3(0.0f) == 0x00);
  CHECK(float_to_e4m3(-0.0f) == 0x80);
  CHECK(float_to_e4m3(std::ldexp(1.0f, -9)) == 0x01);
  CHECK(float_to_e4m3(std::ldexp(1.0f, -10)) == 0x00);        // halfway to 2^-9: even (0)
  CHECK(float_to_e4m3(std::ldexp(3.0f, -10)) == 0x02);        // halfway 1..2: even (2)
  CHECK(float_to_e4m3(-std::ldexp(1.0f, -10)) == 0x80);       // -0
  CHECK(float_to_e4m3(std::ldexp(15.0f, -10)) == 0x08);       // 7.5 steps: rounds up into the normals
  CHECK(float_to_e4m3(float_of(1u)) == 0x00);                 // float32 subnormal
  CHECK(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
}

TEST_CASE("fp8: random floats of every magnitude encode as the reference does, element by element", "[fp8]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> exp(100, 140);  // 2^-27 .. 2^13: under, in and over range
  std::vector<float> x(20000);
  for (float& v : x) v = float_of((rng() & 0x807fffffu) | (exp(rng) << 23));
  std::vector<std::uint8_t> bulk(x.size());
  narrow_to_e4m3(x.data(), bulk.data(), x.size());
  int wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (bulk[i] != ref_encode(x[i]) || float_to_e4m3(x[i]) != bulk[i]) {
      if (++wrong <= 5) FAIL_CHECK("x = " << x[i] << " (bits 0x" << std::hex << bits_of(x[i]) << ")");
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("fp8: block quantization matches the per-block reference, edge blocks and zero blocks included", "[fp8]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  // {130, 2200}: more column blocks (18) than the kernel takes in one chunk (16).
  const std::int64_t shapes[][2] = {{1, 1}, {128, 128}, {130, 257}, {3, 1000}, {300, 5}, {256, 384}, {130, 2200}};
  for (const auto& shape : shapes) {
    const std::int64_t rows = shape[0], cols = shape[1];
    INFO(rows << " x " << cols);
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    for (float& v : x) v = dist(rng) * (rng() % 4 == 0 ? 100.0f : 1.0f);
    if (rows * cols > 200) {
      x[5] = std::numeric_limits<float>::infinity();  // saturates; the scale ignores it
      x[6] = -std::numeric_limits<float>::quiet_NaN();
      x[7] = -0.0f;
      x[8] = 1e-30f;  // underflows to 0 at this scale
    }
    if (rows >= 256) {  // the block row 1, column 0 all zeros
      for (std::int64_t r = 128; r < 256; ++r)
        for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 128); ++c) x[r * cols + c] = 0.0f;
    }
    std::vector<std::uint8_t> want_q, got_q(x.size(), 0xaa);
    std::vector<float> want_s, got_s(static_cast<std::size_t>(((rows + 127) / 128) * ((cols + 127) / 128)), -1.0f);
    ref_quantize(x, rows, cols, want_q, want_s);
    quantize_blocks_e4m3(x.data(), rows, cols, got_q.data(), got_s.data());
    CHECK(got_s == want_s);
    CHECK(got_q == want_q);
    std::vector<float> back(x.size(), 7.0f);
    dequantize_blocks_e4m3(got_q.data(), got_s.data(), rows, cols, back.data());
    const std::int64_t bc = (cols + 127) / 128;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * cols + c);
        const float want = static_cast<float>(ref_decode(want_q[i])) * want_s[(r / 128) * bc + c / 128];
        if (std::isnan(want)) {
          CHECK(std::isnan(back[i]));
        } else if (bits_of(back[i]) != bits_of(want)) {
          FAIL_CHECK("element (" << r << ", " << c << "): " << back[i] << " != " << want);
        }
      }
    }
    if (rows >= 256) {
      CHECK(got_s[static_cast<std::size_t>(bc)] == 1.0f);  // a zero block's scale
      for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 128); ++c) CHECK(bits_of(back[128 * cols + c]) == 0u);
    }
    if (rows * cols > 200) {
      CHECK(got_q[5] == 0x7e);
      CHECK(got_q[6] == 0xff);
      CHECK(got_q[7] == 0x80);
    }
  }
}

TEST_CASE("fp8: the largest finite element of a block quantizes to +-448 and comes back within 1/16", "[fp8]") {
  std::vector<float> x(128 * 128);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  x[77] = -3.5f;
  std::vector<std::uint8_t> q(x.size());
  float scale = 0.0f;
  quantize_blocks_e4m3(x.data(), 128, 128, q.data(), &scale);
  CHECK(scale == 3.5f / 448.0f);
  CHECK(q[77] == 0xfe);
  std::vector<float> back(x.size());
  dequantize_blocks_e4m3(q.data(), &scale, 128, 128, back.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    // 3 mantissa bits: relative error <= 2^-4 for normals, absolute <= 2^-10 * scale below.
    CHECK(std::fabs(back[i] - x[i]) <= std::max(std::fabs(x[i]) / 16.0f, std::ldexp(scale, -10)) * 1.0001f);
  }
}

TEST_CASE("fp8: stacked experts [E, out, in] with out a multiple of 128 get each expert's own blocks and scales",
          "[fp8]") {
  const std::int64_t experts = 3, out = 256, in = 200;
  std::vector<float> x(static_cast<std::size_t>(experts * out * in));
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = dist(rng) * static_cast<float>(1 + i / (out * in));  // per-expert range
  const std::size_t per_scales = static_cast<std::size_t>((out / 128) * ((in + 127) / 128));
  std::vector<std::uint8_t> q(x.size()), q_each(x.size());
  std::vector<float> s(experts * per_scales), s_each(experts * per_scales);
  quantize_blocks_e4m3(x.data(), experts * out, in, q.data(), s.data());  // what the layout does: leading dims flattened
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::size_t at = static_cast<std::size_t>(e * out * in);
    quantize_blocks_e4m3(x.data() + at, out, in, q_each.data() + at, s_each.data() + e * per_scales);
  }
  CHECK(q == q_each);
  CHECK(s == s_each);
  CHECK(fp8_scale_shape({experts, out, in}) == std::vector<std::int64_t>{experts * out / 128, 2});
}
