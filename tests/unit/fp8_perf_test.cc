// Figures for docs/perf/formats-fp8.md (hidden: run with
// `ws_unit_tests "[fp8-perf]"`): bytes on the wire fp8 vs bf16 for the
// reference policy's layout and a 7B-shaped synthetic one, and conversion
// throughput on one core (GB/s of float32 input), quantize_image() against
// narrow_image() to bfloat16 measured in the same run, interleaved, medians;
// then the Fp8Publisher's converter thread per version.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "weightsync/fp8.h"
#include "weightsync/memory.h"

using namespace weightsync;

namespace {

using Clock = std::chrono::steady_clock;

// rl/policy/model_config.cc's parameter_specs() for the default config
// (vocab 261, d 128, 4 layers, d_ff 512, learned positions, tied embeddings).
WeightLayout reference_policy_layout() {
  const std::int64_t v = 261, d = 128, f = 512, seq = 512;
  std::vector<TensorSpec> s{{"tok_embedding.weight", DType::kFloat32, {v, d}},
                            {"pos_embedding.weight", DType::kFloat32, {seq, d}}};
  for (int i = 0; i < 4; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    s.push_back({p + "ln1.weight", DType::kFloat32, {d}});
    s.push_back({p + "ln1.bias", DType::kFloat32, {d}});
    s.push_back({p + "attn.qkv.weight", DType::kFloat32, {3 * d, d}});
    s.push_back({p + "attn.qkv.bias", DType::kFloat32, {3 * d}});
    s.push_back({p + "attn.out.weight", DType::kFloat32, {d, d}});
    s.push_back({p + "attn.out.bias", DType::kFloat32, {d}});
    s.push_back({p + "ln2.weight", DType::kFloat32, {d}});
    s.push_back({p + "ln2.bias", DType::kFloat32, {d}});
    s.push_back({p + "mlp.fc1.weight", DType::kFloat32, {f, d}});
    s.push_back({p + "mlp.fc1.bias", DType::kFloat32, {f}});
    s.push_back({p + "mlp.fc2.weight", DType::kFloat32, {d, f}});
    s.push_back({p + "mlp.fc2.bias", DType::kFloat32, {d}});
  }
  s.push_back({"final_ln.weight", DType::kFloat32, {d}});
  s.push_back({"final_ln.bias", DType::kFloat32, {d}});
  return WeightLayout::build(std::move(s), 4).value();
}

// A Llama-7B-shaped layout (32 layers, hidden 4096, MLP 11008, vocab 32000).
WeightLayout llama7b_layout() {
  const std::int64_t h = 4096, m = 11008, v = 32000;
  std::vector<TensorSpec> s{{"model.embed_tokens.weight", DType::kFloat32, {v, h}}};
  for (int i = 0; i < 32; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"})
      s.push_back({p + "self_attn." + n + ".weight", DType::kFloat32, {h, h}});
    s.push_back({p + "mlp.gate_proj.weight", DType::kFloat32, {m, h}});
    s.push_back({p + "mlp.up_proj.weight", DType::kFloat32, {m, h}});
    s.push_back({p + "mlp.down_proj.weight", DType::kFloat32, {h, m}});
    s.push_back({p + "input_layernorm.weight", DType::kFloat32, {h}});
    s.push_back({p + "post_attention_layernorm.weight", DType::kFloat32, {h}});
  }
  s.push_back({"model.norm.weight", DType::kFloat32, {h}});
  s.push_back({"lm_head.weight", DType::kFloat32, {v, h}});
  return WeightLayout::build(std::move(s)).value();
}

void report_bytes(const char* name, const WeightLayout& wide) {
  const auto bf16 = narrowed_layout(wide, DType::kBFloat16).value();
  const auto fp8 = fp8_layout(wide).value();
  Fp8Policy all;  // every matrix in fp8 (no keep rules): the pure 0.5x + scales case
  all.keep.clear();
  const auto fp8_all = fp8_layout(wide, all).value();
  std::uint64_t scales = 0;
  for (const TensorEntry& t : fp8.tensors())
    if (t.spec.name.size() > 10 && t.spec.name.compare(t.spec.name.size() - 10, 10, "_scale_inv") == 0) scales += t.bytes;
  std::printf("%s: float32 %llu B, bf16 %llu B, fp8 (default rule) %llu B of which scales %llu B: %.6f x bf16; "
              "fp8 (no keep rules) %llu B: %.6f x bf16\n",
              name, static_cast<unsigned long long>(wide.payload_bytes()),
              static_cast<unsigned long long>(bf16.payload_bytes()), static_cast<unsigned long long>(fp8.payload_bytes()),
              static_cast<unsigned long long>(scales), static_cast<double>(fp8.payload_bytes()) / bf16.payload_bytes(),
              static_cast<unsigned long long>(fp8_all.payload_bytes()),
              static_cast<double>(fp8_all.payload_bytes()) / bf16.payload_bytes());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("fp8 perf: bytes on the wire and one-core conversion throughput against bf16", "[.][fp8-perf]") {
  report_bytes("reference policy", reference_policy_layout());
  report_bytes("llama-7b shape", llama7b_layout());

  // 4 matrices of 2048 x 2048 float32 (64 MiB), weights ~ N(0, 0.02).
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 4; ++i) specs.push_back({"layers." + std::to_string(i) + ".w", DType::kFloat32, {2048, 2048}});
  const WeightLayout wide = WeightLayout::build(specs).value();
  const WeightLayout fp8 = fp8_layout(wide).value();
  const WeightLayout bf16 = narrowed_layout(wide, DType::kBFloat16).value();
  std::vector<float> src(wide.total_bytes() / 4);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (float& x : src) x = dist(rng);
  std::vector<unsigned char> q(fp8.total_bytes()), h(bf16.total_bytes());
  REQUIRE(quantize_image(wide, src.data(), fp8, q.data()).ok());  // warm: pages touched
  REQUIRE(narrow_image(wide, src.data(), bf16, h.data()).ok());
  const int runs = 9;
  std::vector<double> fp8_s, bf16_s;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    REQUIRE(quantize_image(wide, src.data(), fp8, q.data()).ok());
    auto t1 = Clock::now();
    REQUIRE(narrow_image(wide, src.data(), bf16, h.data()).ok());
    auto t2 = Clock::now();
    fp8_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    bf16_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double gb = static_cast<double>(wide.payload_bytes()) / 1e9;
  std::printf("one core, %.1f MiB float32, %d runs interleaved: fp8 quantize_image median %.2f GB/s "
              "(min %.2f, max %.2f); bf16 narrow_image median %.2f GB/s (min %.2f, max %.2f)\n",
              wide.payload_bytes() / 1048576.0, runs, gb / median(fp8_s),
              gb / *std::max_element(fp8_s.begin(), fp8_s.end()), gb / *std::min_element(fp8_s.begin(), fp8_s.end()),
              gb / median(bf16_s), gb / *std::max_element(bf16_s.begin(), bf16_s.end()),
              gb / *std::min_element(bf16_s.begin(), bf16_s.end()));

  // The converter thread, begin_publish to commit, per version.
  PublisherOptions options;
  options.slots = 3;
  auto pub = Fp8Publisher::create(wide, {}, options);
  REQUIRE(pub.ok());
  auto npub = NarrowingPublisher::create(wide, DType::kBFloat16, options);
  REQUIRE(npub.ok());
  std::vector<double> conv_fp8, conv_bf16;
  for (std::uint64_t v = 1; v <= 3 + runs; ++v) {  // 3 warm-ups: every slot touched once
    REQUIRE((*pub)->publish(v, src.data(), wide.total_bytes()).ok());
    REQUIRE((*pub)->flush().ok());
    REQUIRE((*npub)->publish(v, src.data(), wide.total_bytes()).ok());
    REQUIRE((*npub)->flush().ok());
    if (v > 3) {
      conv_fp8.push_back((*pub)->stats().last_conversion_seconds);
      conv_bf16.push_back((*npub)->stats().last_conversion_seconds);
    }
  }
  std::printf("converter thread (begin_publish..commit), %d versions: Fp8Publisher median %.2f GB/s, "
              "NarrowingPublisher bf16 median %.2f GB/s\n",
              runs, gb / median(conv_fp8), gb / median(conv_bf16));
}
