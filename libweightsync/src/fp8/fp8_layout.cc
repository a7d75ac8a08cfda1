// The per-tensor precision rule (Fp8Policy, name globs), scale names and
// shapes, and fp8_layout(): a float32 layout turned into the fp8 wire layout
// (weightsync/fp8.h has the contract).
#include <string>
#include <unordered_set>

#include "weightsync/fp8.h"

namespace weightsync {
namespace {

bool keepable(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16;
}

// The dtype a float32 tensor keeps, or kFloat8E4M3 when it is quantized.
DType wire_dtype(const Fp8Policy& policy, const TensorSpec& spec) {
  if (spec.shape.size() < 2) return policy.small_tensor_dtype;
  for (const Fp8KeepRule& rule : policy.keep) {
    if (fp8_name_matches(rule.pattern, spec.name)) return rule.dtype;
  }
  return DType::kFloat8E4M3;
}

}  // namespace

std::vector<std::int64_t> fp8_scale_shape(const std::vector<std::int64_t>& shape) {
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  const std::int64_t cols = shape.empty() ? 1 : shape.back();
  return {(rows + kFp8BlockSize - 1) / kFp8BlockSize, (cols + kFp8BlockSize - 1) / kFp8BlockSize};
}

std::string fp8_scale_name(const std::string& name) {
  return name + "_scale_inv";
}

std::vector<Fp8KeepRule> default_fp8_keep_rules() {
  // Embeddings (tok_embedding, embed_tokens, wte, wpe), norms, the MoE
  // router (DeepSeek/Qwen "mlp.gate.weight", Mixtral "block_sparse_moe.gate",
  // "router"), the output head. "gate_proj" (a dense MLP matrix) is not kept.
  return {{"*embed*", DType::kBFloat16},  {"*wte*", DType::kBFloat16},   {"*wpe*", DType::kBFloat16},
          {"*norm*", DType::kBFloat16},   {"*router*", DType::kBFloat16}, {"*.gate.weight", DType::kBFloat16},
          {"*.gate", DType::kBFloat16},   {"*lm_head*", DType::kBFloat16}, {"output.weight", DType::kBFloat16}};
}

bool fp8_name_matches(const std::string& pattern, const std::string& name) noexcept {
  // Iterative glob with one backtrack point (the last '*'): linear-ish, no recursion.
  std::size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Result<WeightLayout> fp8_layout(const WeightLayout& wide, const Fp8Policy& policy) try {
  if (!keepable(policy.small_tensor_dtype)) {
    return Status(ErrorCode::kInvalidArgument, std::string("fp8_layout(): small_tensor_dtype must be float32 or "
                                                           "bfloat16, not ") +
                                                   to_string(policy.small_tensor_dtype));
  }
  for (const Fp8KeepRule& rule : policy.keep) {
    if (!keepable(rule.dtype)) {
      return Status(ErrorCode::kInvalidArgument, "fp8_layout(): the keep rule '" + rule.pattern +
                                                     "' has dtype " + to_string(rule.dtype) +
                                                     ": a kept tensor is float32 or bfloat16");
    }
  }
  std::vector<TensorSpec> specs;
  for (const TensorEntry& t : wide.tensors()) {
    TensorSpec spec = t.spec;
    if (spec.dtype != DType::kFloat32) {
      specs.push_back(std::move(spec));
      continue;
    }
    spec.dtype = wire_dtype(policy, spec);
    const bool quantized = spec.dtype == DType::kFloat8E4M3;
    specs.push_back(std::move(spec));
    if (!quantized) continue;
    const std::string scale = fp8_scale_name(t.spec.name);
    if (wide.find(scale) != nullptr) {
      return Status(ErrorCode::kInvalidArgument, "fp8_layout(): tensor '" + t.spec.name +
                                                     "' would get the scale tensor '" + scale +
                                                     "', but the layout already has a tensor of that name "
                                                     "(keep one of them by a rule, or rename it)");
    }
    specs.push_back({scale, DType::kFloat32, fp8_scale_shape(t.spec.shape)});
  }
  return WeightLayout::build(std::move(specs), wide.alignment());
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("fp8_layout: ") + e.what());
}

}  // namespace weightsync
