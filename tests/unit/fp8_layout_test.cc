// The fp8 wire layout (weightsync/fp8.h): the per-tensor precision rule
// (defaults and name globs), scale names and shapes, whole-image quantize
// and dequantize, and what a hostile or mismatched publisher can send: bad
// scales (NaN, inf, negative, huge), scale tensors of the wrong shape or
// missing, layouts whose names do not match. Each is a clear
// kInvalidArgument and nothing is written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "fp8/fp8_plan.h"
#include "weightsync/fp8.h"

using namespace weightsync;

namespace {

WeightLayout build(std::vector<TensorSpec> specs, std::size_t alignment = 4) {
  auto built = WeightLayout::build(std::move(specs), alignment);
  REQUIRE(built.ok());
  return std::move(built).value();
}

// The reference policy's names (rl/policy/model_config.cc) plus DeepSeek/Qwen MoE names.
WeightLayout model_layout() {
  return build({{"tok_embedding.weight", DType::kFloat32, {50, 32}},
                {"layers.0.ln1.weight", DType::kFloat32, {32}},
                {"layers.0.attn.qkv.weight", DType::kFloat32, {96, 32}},
                {"layers.0.attn.qkv.bias", DType::kFloat32, {96}},
                {"layers.0.mlp.fc1.weight", DType::kFloat32, {200, 130}},
                {"model.layers.1.mlp.gate.weight", DType::kFloat32, {8, 32}},
                {"model.layers.1.mlp.gate_proj.weight", DType::kFloat32, {64, 32}},
                {"model.layers.1.mlp.experts.w1", DType::kFloat32, {4, 100, 40}},
                {"model.norm.weight", DType::kFloat32, {32}},
                {"step", DType::kInt64, {1}},
                {"lm_head.weight", DType::kFloat32, {50, 32}}},
               8);
}

std::vector<unsigned char> random_image(const WeightLayout& layout, std::uint32_t seed) {
  std::vector<unsigned char> image(layout.total_bytes(), 0);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  for (const TensorEntry& t : layout.tensors()) {
    for (std::uint64_t i = 0; i < t.bytes / 4; ++i) {
      const float f = dist(rng);
      std::memcpy(&image[t.offset + 4 * i], &f, 4);
    }
  }
  return image;
}

void put_float(std::vector<unsigned char>& image, const WeightLayout& layout, const std::string& name,
               std::size_t index, float value) {
  const TensorEntry* t = layout.find(name);
  REQUIRE(t != nullptr);
  std::memcpy(&image[t->offset + 4 * index], &value, 4);
}

}  // namespace

TEST_CASE("fp8 layout: the default rule keeps embeddings, norms, the router, the head and 1-D tensors", "[fp8]") {
  const WeightLayout wide = model_layout();
  auto fp8 = fp8_layout(wide);
  REQUIRE(fp8.ok());
  auto dtype = [&](const std::string& name) {
    const TensorEntry* t = fp8->find(name);
    REQUIRE(t != nullptr);
    return t->spec.dtype;
  };
  CHECK(dtype("tok_embedding.weight") == DType::kBFloat16);
  CHECK(dtype("layers.0.ln1.weight") == DType::kBFloat16);
  CHECK(dtype("layers.0.attn.qkv.bias") == DType::kBFloat16);
  CHECK(dtype("model.layers.1.mlp.gate.weight") == DType::kBFloat16);
  CHECK(dtype("model.norm.weight") == DType::kBFloat16);
  CHECK(dtype("lm_head.weight") == DType::kBFloat16);
  CHECK(dtype("step") == DType::kInt64);
  CHECK(dtype("layers.0.attn.qkv.weight") == DType::kFloat8E4M3);
  CHECK(dtype("layers.0.mlp.fc1.weight") == DType::kFloat8E4M3);
  CHECK(dtype("model.layers.1.mlp.gate_proj.weight") == DType::kFloat8E4M3);
  CHECK(dtype("model.layers.1.mlp.experts.w1") == DType::kFloat8E4M3);
  // Each scale right after its weight, float32 [ceil(rows/128), ceil(cols/128)].
  const auto& ts = fp8->tensors();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].spec.dtype != DType::kFloat8E4M3) continue;
    REQUIRE(i + 1 < ts.size());
    CHECK(ts[i + 1].spec.name == ts[i].spec.name + "_scale_inv");
    CHECK(ts[i + 1].spec.dtype == DType::kFloat32);
  }
  CHECK(fp8->find("layers.0.mlp.fc1.weight_scale_inv")->spec.shape == std::vector<std::int64_t>{2, 2});
  CHECK(fp8->find("model.layers.1.mlp.experts.w1_scale_inv")->spec.shape == std::vector<std::int64_t>{4, 1});
  CHECK(ts.size() == wide.tensors().size() + 4);
  CHECK(check_fp8_pair(*fp8, wide).ok());
}

TEST_CASE("fp8 layout: keep rules are configurable by name globs, float32 or bfloat16, checked", "[fp8]") {
  CHECK(fp8_name_matches("*norm*", "model.layers.0.input_layernorm.weight"));
  CHECK(fp8_name_matches("layers.?.attn.*", "layers.3.attn.qkv.weight"));
  CHECK_FALSE(fp8_name_matches("layers.?.attn.*", "layers.13.attn.qkv.weight"));
  CHECK(fp8_name_matches("*.gate.weight", "model.layers.1.mlp.gate.weight"));
  CHECK_FALSE(fp8_name_matches("*.gate.weight", "model.layers.1.mlp.gate_proj.weight"));
  CHECK(fp8_name_matches("*", ""));
  CHECK_FALSE(fp8_name_matches("", "x"));
  CHECK(fp8_name_matches("a*b*c", "aXbYbZc"));

  const WeightLayout wide = model_layout();
  Fp8Policy policy;
  policy.keep = {{"*qkv*", DType::kFloat32}};
  policy.small_tensor_dtype = DType::kFloat32;
  auto fp8 = fp8_layout(wide, policy);
  REQUIRE(fp8.ok());
  CHECK(fp8->find("layers.0.attn.qkv.weight")->spec.dtype == DType::kFloat32);
  CHECK(fp8->find("layers.0.ln1.weight")->spec.dtype == DType::kFloat32);
  CHECK(fp8->find("tok_embedding.weight")->spec.dtype == DType::kFloat8E4M3);  // no default rules now
  CHECK(check_fp8_pair(*fp8, wide).ok());

  policy.keep = {{"*", DType::kFloat16}};
  auto refused = fp8_layout(wide, policy);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::Contains("float32 or bfloat16"));

  const WeightLayout clash = build({{"a.weight", DType::kFloat32, {4, 4}}, {"a.weight_scale_inv", DType::kFloat32, {1, 1}}});
  auto collided = fp8_layout(clash, Fp8Policy{{}, DType::kBFloat16});
  REQUIRE_FALSE(collided.ok());
  CHECK_THAT(collided.status().message(), Catch::Contains("a.weight_scale_inv"));
}

TEST_CASE("fp8 images: quantize then dequantize gives the block kernels' values, bf16 and copies exact", "[fp8]") {
  const WeightLayout wide = model_layout();
  auto fp8 = fp8_layout(wide);
  REQUIRE(fp8.ok());
  const auto src = random_image(wide, 5);
  std::vector<unsigned char> q(fp8->total_bytes(), 0), back(wide.total_bytes(), 0);
  REQUIRE(quantize_image(wide, src.data(), *fp8, q.data()).ok());
  REQUIRE(check_fp8_scales(*fp8, q.data()).ok());
  REQUIRE(dequantize_image(*fp8, q.data(), wide, back.data()).ok());
  for (const TensorEntry& w : wide.tensors()) {
    const TensorEntry& f = *fp8->find(w.spec.name);
    INFO(w.spec.name);
    std::vector<unsigned char> want(w.bytes);
    if (f.spec.dtype == DType::kFloat8E4M3) {
      const std::int64_t cols = w.spec.shape.back();
      const std::int64_t rows = static_cast<std::int64_t>(w.bytes / 4) / cols;
      std::vector<unsigned char> qq(w.bytes / 4);
      std::vector<float> s(fp8->find(w.spec.name + "_scale_inv")->bytes / 4);
      quantize_blocks_e4m3(&src[w.offset], rows, cols, qq.data(), s.data());
      CHECK(std::memcmp(qq.data(), &q[f.offset], qq.size()) == 0);
      dequantize_blocks_e4m3(qq.data(), s.data(), rows, cols, want.data());
    } else if (f.spec.dtype == DType::kBFloat16) {
      std::vector<unsigned char> h(w.bytes / 2);
      narrow_to_bfloat16(&src[w.offset], h.data(), w.bytes / 4);
      widen_bfloat16(h.data(), want.data(), w.bytes / 4);
    } else {
      std::memcpy(want.data(), &src[w.offset], w.bytes);
    }
    CHECK(std::memcmp(want.data(), &back[w.offset], w.bytes) == 0);
  }
}

TEST_CASE("fp8 hostile publisher: NaN, inf, negative and huge scales are refused, nothing written", "[fp8][hostile]") {
  const WeightLayout wide = model_layout();
  auto fp8 = fp8_layout(wide);
  REQUIRE(fp8.ok());
  const auto src = random_image(wide, 9);
  std::vector<unsigned char> good(fp8->total_bytes(), 0);
  REQUIRE(quantize_image(wide, src.data(), *fp8, good.data()).ok());
  const float bad_scales[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -1.0f, -0.5f, FLT_MAX, FLT_MAX / 447.0f};
  for (float bad : bad_scales) {
    INFO("scale " << bad);
    auto image = good;
    put_float(image, *fp8, "layers.0.mlp.fc1.weight_scale_inv", 3, bad);
    const Status checked = check_fp8_scales(*fp8, image.data());
    REQUIRE_FALSE(checked.ok());
    CHECK(checked.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(checked.message(), Catch::Contains("layers.0.mlp.fc1.weight") && Catch::Contains("block (1, 1)"));
    std::vector<unsigned char> out(wide.total_bytes(), 0x5a);
    const Status refused = dequantize_image(*fp8, image.data(), wide, out.data());
    CHECK(refused.code() == ErrorCode::kInvalidArgument);
    CHECK(std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 0x5a; }));
  }
  // The largest allowed scale and a zero scale are accepted: finite results.
  auto image = good;
  put_float(image, *fp8, "layers.0.mlp.fc1.weight_scale_inv", 0, FLT_MAX / 448.0f);
  put_float(image, *fp8, "layers.0.mlp.fc1.weight_scale_inv", 1, 0.0f);
  CHECK(check_fp8_scales(*fp8, image.data()).ok());
}

TEST_CASE("fp8 hostile publisher: a scale of the wrong shape, a missing scale or mismatched names are refused",
          "[fp8][hostile]") {
  const WeightLayout wide = build({{"w", DType::kFloat32, {130, 20}}, {"b", DType::kFloat32, {20}}});
  auto expect_refused = [&](const WeightLayout& fp8, const char* says) {
    INFO(says);
    const Status pair = check_fp8_pair(fp8, wide);
    REQUIRE_FALSE(pair.ok());
    CHECK(pair.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(pair.message(), Catch::Contains(says));
    std::vector<unsigned char> in(fp8.total_bytes(), 0), out(wide.total_bytes(), 0x5a);
    CHECK(dequantize_image(fp8, in.data(), wide, out.data()).code() == ErrorCode::kInvalidArgument);
    CHECK(std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 0x5a; }));
  };
  const DType e4 = DType::kFloat8E4M3, f32 = DType::kFloat32, bf = DType::kBFloat16;
  CHECK(check_fp8_pair(build({{"w", e4, {130, 20}}, {"w_scale_inv", f32, {2, 1}}, {"b", bf, {20}}}), wide).ok());
  expect_refused(build({{"w", e4, {130, 20}}, {"w_scale_inv", f32, {1, 1}}, {"b", bf, {20}}}), "not float32 [2, 1]");
  expect_refused(build({{"w", e4, {130, 20}}, {"w_scale_inv", bf, {2, 1}}, {"b", bf, {20}}}), "not float32 [2, 1]");
  expect_refused(build({{"w", e4, {130, 20}}, {"b", bf, {20}}}), "scale tensor 'w_scale_inv' is missing");
  expect_refused(build({{"w", e4, {130, 20}}, {"w_scale", f32, {2, 1}}, {"b", bf, {20}}}), "missing");
  expect_refused(build({{"W", e4, {130, 20}}, {"W_scale_inv", f32, {2, 1}}, {"b", bf, {20}}}),
                 "'w': is missing from the fp8 layout");
  expect_refused(build({{"w", e4, {130, 20}}, {"w_scale_inv", f32, {2, 1}}, {"b", bf, {20}}, {"x", f32, {1}}}),
                 "'x': is neither");
  expect_refused(build({{"w", e4, {20, 130}}, {"w_scale_inv", f32, {1, 2}}, {"b", bf, {20}}}), "has shape");
  expect_refused(build({{"w", e4, {130, 20}}, {"w_scale_inv", f32, {2, 1}}, {"b", e4, {20}}}), "rank < 2");
  expect_refused(build({{"w", DType::kInt8, {130, 20}}, {"b", bf, {20}}}), "float32 is sent as");
  // A scale whose name is also a tensor of the wide layout: used twice.
  const WeightLayout wide2 = build({{"w", f32, {130, 20}}, {"w_scale_inv", f32, {2, 1}}});
  const Status twice = check_fp8_pair(build({{"w", e4, {130, 20}}, {"w_scale_inv", f32, {2, 1}}}), wide2);
  CHECK(twice.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(twice.message(), Catch::Contains("used twice"));
  const WeightLayout wide3 = build({{"w_scale_inv", f32, {2, 1}}, {"w", f32, {130, 20}}});  // the other order
  const Status twice3 = check_fp8_pair(build({{"w", e4, {130, 20}}, {"w_scale_inv", f32, {2, 1}}}), wide3);
  CHECK(twice3.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(twice3.message(), Catch::Contains("used twice"));
  // check_fp8_scales on its own sees a missing scale too (an fp8 engine calls only it).
  const WeightLayout lone = build({{"w", e4, {130, 20}}});
  std::vector<unsigned char> img(lone.total_bytes(), 0);
  CHECK(check_fp8_scales(lone, img.data()).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("fp8 hostile publisher: 3000 randomly corrupted layouts and scales, each refused or dequantized safely",
          "[fp8][hostile]") {
  // Start from the true fp8 layout and change one to three things at random
  // (a name, a dtype, a dimension, a tensor dropped or added, a scale value);
  // every result is either refused with kInvalidArgument and nothing written,
  // or accepted, in which case it dequantizes inside the buffers (valgrind
  // and ASan builds see any stray access) into finite or NaN values only where
  // the image has NaN codes.
  const WeightLayout wide = model_layout();
  const WeightLayout fp8 = fp8_layout(wide).value();
  const auto src = random_image(wide, 13);
  std::vector<unsigned char> good(fp8.total_bytes(), 0);
  REQUIRE(quantize_image(wide, src.data(), fp8, good.data()).ok());
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3, DType::kInt8,
                          DType::kInt64};
  std::mt19937 rng(2024);
  int refused = 0, accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<TensorSpec> specs;
    for (const TensorEntry& t : fp8.tensors()) specs.push_back(t.spec);
    const bool scale_only = rng() % 2 == 0;  // else 1 to 3 changes of the layout
    const int changes = scale_only ? 0 : 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < changes; ++c) {
      TensorSpec& t = specs[rng() % specs.size()];
      switch (rng() % 5) {
        case 0: t.name += "x"; break;
        case 1: t.dtype = dtypes[rng() % 6]; break;
        case 2: t.shape[rng() % t.shape.size()] += 1 + static_cast<std::int64_t>(rng() % 200); break;
        case 3: specs.erase(specs.begin() + static_cast<std::ptrdiff_t>(rng() % specs.size())); break;
        default: specs.push_back({"extra" + std::to_string(c), DType::kFloat32, {3, 5}}); break;
      }
    }
    auto layout = WeightLayout::build(specs, 8);
    if (!layout.ok()) continue;  // the layout rules refuse it before any fp8 check
    std::vector<unsigned char> image = scale_only ? good : std::vector<unsigned char>(layout->total_bytes(), 0);
    if (scale_only) {  // one scale value of one scale tensor, hostile or not
      std::vector<const TensorEntry*> scales;
      for (const TensorEntry& e : layout->tensors())
        if (e.spec.name.find("_scale_inv") != std::string::npos) scales.push_back(&e);
      REQUIRE(scales.size() == 4);
      const TensorEntry& t = *scales[rng() % scales.size()];
      const float values[] = {std::numeric_limits<float>::quiet_NaN(), -1.0f, FLT_MAX, 1e-3f, 0.0f,
                              std::numeric_limits<float>::infinity()};
      const float v = values[rng() % 6];
      std::memcpy(&image[t.offset + 4 * (rng() % (t.bytes / 4))], &v, 4);
    }
    std::vector<unsigned char> out(wide.total_bytes(), 0x5a);
    const Status s = dequantize_image(*layout, image.data(), wide, out.data());
    if (s.ok()) {
      ++accepted;
      CHECK(check_fp8_pair(*layout, wide).ok());
      CHECK(check_fp8_scales(*layout, image.data()).ok());
    } else {
      ++refused;
      CHECK(s.code() == ErrorCode::kInvalidArgument);
      CHECK(std::all_of(out.begin(), out.end(), [](unsigned char b) { return b == 0x5a; }));
    }
  }
  CHECK(refused > 1000);
  CHECK(accepted > 300);  // the scale values that stay legal (1e-3, 0) on an intact layout
}

TEST_CASE("fp8 converter: a stop request ends the quantization before the next band or chunk", "[fp8]") {
  // What the Fp8Publisher's destructor relies on to abandon a conversion promptly.
  const WeightLayout wide = model_layout();
  const WeightLayout fp8 = fp8_layout(wide).value();
  auto plan = detail::make_fp8_plan(fp8, wide);
  REQUIRE(plan.ok());
  const auto src = random_image(wide, 3);
  std::vector<unsigned char> out(fp8.total_bytes(), 0x5a);
  std::atomic<bool> stop{true};
  CHECK_FALSE(detail::run_quantize(plan.value(), src.data(), out.data(), &stop));
  CHECK(std::all_of(out.begin(), out.end(), [](unsigned char b) { return b == 0x5a; }));
  stop = false;
  CHECK(detail::run_quantize(plan.value(), src.data(), out.data(), &stop));
  std::vector<unsigned char> want(fp8.total_bytes(), 0x5a);
  REQUIRE(quantize_image(wide, src.data(), fp8, want.data()).ok());
  CHECK(out == want);
}
