// policy/model_config.cc: see model_config.h.
#include "policy/model_config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace policy {
namespace {

// Bounds that keep every product below 2^62 and the model within reason.
constexpr std::int64_t kMaxDim = 1 << 16;
constexpr std::int64_t kMaxLayers = 1024;
constexpr std::int64_t kMaxSeqLen = 1 << 20;

std::string format_double(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return buf;
}

bool parse_int(const std::string& text, std::int64_t* out) {
  if (text.empty() || text.size() > 18) return false;  // 18 digits always fit
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  *out = value;
  return true;
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = value;
  return true;
}

}  // namespace

const char* position_encoding_name(PositionEncoding positions) {
  return positions == PositionEncoding::kRotary ? "rotary" : "learned";
}

std::optional<std::string> ModelConfig::validate() const {
  auto in_range = [](std::int64_t v, std::int64_t hi) { return v >= 1 && v <= hi; };
  if (!in_range(vocab_size, kMaxDim)) return "vocab_size must be in 1.." + std::to_string(kMaxDim);
  if (!in_range(d_model, kMaxDim)) return "d_model must be in 1.." + std::to_string(kMaxDim);
  if (!in_range(n_layers, kMaxLayers)) return "n_layers must be in 1.." + std::to_string(kMaxLayers);
  if (!in_range(n_heads, d_model) || d_model % n_heads != 0) {
    return "n_heads must be at least 1 and divide d_model (" + std::to_string(d_model) + ")";
  }
  if (!in_range(d_ff, kMaxDim)) return "d_ff must be in 1.." + std::to_string(kMaxDim);
  if (!in_range(max_seq_len, kMaxSeqLen)) return "max_seq_len must be in 1.." + std::to_string(kMaxSeqLen);
  if (positions == PositionEncoding::kRotary && head_dim() % 2 != 0) {
    return "rotary positions need an even head_dim (d_model / n_heads)";
  }
  if (!(layer_norm_eps > 0.0 && layer_norm_eps < 1.0)) return "layer_norm_eps must be in (0, 1)";
  if (!(rope_theta > 1.0 && rope_theta < 1e12)) return "rope_theta must be in (1, 1e12)";
  return std::nullopt;
}

std::map<std::string, std::string> ModelConfig::to_map() const {
  return {{"vocab_size", std::to_string(vocab_size)},
          {"d_model", std::to_string(d_model)},
          {"n_layers", std::to_string(n_layers)},
          {"n_heads", std::to_string(n_heads)},
          {"d_ff", std::to_string(d_ff)},
          {"max_seq_len", std::to_string(max_seq_len)},
          {"positions", position_encoding_name(positions)},
          {"tie_embeddings", tie_embeddings ? "true" : "false"},
          {"layer_norm_eps", format_double(layer_norm_eps)},
          {"rope_theta", format_double(rope_theta)}};
}

zorplex::Result<ModelConfig> ModelConfig::from_map(const std::map<std::string, std::string>& map) {
  ModelConfig config;
  auto get = [&](const char* key) -> const std::string* {
    auto it = map.find(key);
    return it == map.end() ? nullptr : &it->second;
  };
  struct IntField {
    const char* key;
    std::int64_t* field;
  };
  for (const IntField& f : {IntField{"vocab_size", &config.vocab_size}, IntField{"d_model", &config.d_model},
                            IntField{"n_layers", &config.n_layers}, IntField{"n_heads", &config.n_heads},
                            IntField{"d_ff", &config.d_ff}, IntField{"max_seq_len", &config.max_seq_len}}) {
    const std::string* text = get(f.key);
    if (text == nullptr) return zorplex::Error{std::string("model config: missing key '") + f.key + "'"};
    if (!parse_int(*text, f.field)) {
      return zorplex::Error{std::string("model config: '") + f.key + "' is '" + *text +
                            "', not a non-negative decimal integer"};
    }
  }
  const std::string* positions = get("positions");
  if (positions == nullptr) return zorplex::Error{"model config: missing key 'positions'"};
  if (*positions == "learned") {
    config.positions = PositionEncoding::kLearned;
  } else if (*positions == "rotary") {
    config.positions = PositionEncoding::kRotary;
  } else {
    return zorplex::Error{"model config: 'positions' is '" + *positions + "': expected learned or rotary"};
  }
  const std::string* tie = get("tie_embeddings");
  if (tie == nullptr) return zorplex::Error{"model config: missing key 'tie_embeddings'"};
  if (*tie != "true" && *tie != "false") {
    return zorplex::Error{"model config: 'tie_embeddings' is '" + *tie + "': expected true or false"};
  }
  config.tie_embeddings = *tie == "true";
  struct DoubleField {
    const char* key;
    double* field;
  };
  for (const DoubleField& f : {DoubleField{"layer_norm_eps", &config.layer_norm_eps},
                               DoubleField{"rope_theta", &config.rope_theta}}) {
    const std::string* text = get(f.key);
    if (text == nullptr) return zorplex::Error{std::string("model config: missing key '") + f.key + "'"};
    if (!parse_double(*text, f.field)) {
      return zorplex::Error{std::string("model config: '") + f.key + "' is '" + *text + "', not a number"};
    }
  }
  if (auto problem = config.validate()) return zorplex::Error{"model config: " + *problem};
  return config;
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  return vocab_size == o.vocab_size && d_model == o.d_model && n_layers == o.n_layers &&
         n_heads == o.n_heads && d_ff == o.d_ff && max_seq_len == o.max_seq_len && positions == o.positions &&
         tie_embeddings == o.tie_embeddings && layer_norm_eps == o.layer_norm_eps &&
         rope_theta == o.rope_theta;
}

std::vector<ParamSpec> parameter_specs(const ModelConfig& config) {
  std::vector<ParamSpec> specs;
  std::int64_t offset = 0;
  auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    ParamSpec spec;
    spec.name = std::move(name);
    spec.numel = 1;
    for (std::int64_t d : shape) spec.numel *= d;
    spec.shape = std::move(shape);
    spec.offset = offset;
    spec.byte_offset = offset * static_cast<std::int64_t>(sizeof(float));
    offset += spec.numel;
    specs.push_back(std::move(spec));
  };
  const std::int64_t v = config.vocab_size, d = config.d_model, f = config.d_ff;
  add("tok_embedding.weight", {v, d});
  if (config.positions == PositionEncoding::kLearned) add("pos_embedding.weight", {config.max_seq_len, d});
  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add(p + "ln1.weight", {d});
    add(p + "ln1.bias", {d});
    add(p + "attn.qkv.weight", {3 * d, d});
    add(p + "attn.qkv.bias", {3 * d});
    add(p + "attn.out.weight", {d, d});
    add(p + "attn.out.bias", {d});
    add(p + "ln2.weight", {d});
    add(p + "ln2.bias", {d});
    add(p + "mlp.fc1.weight", {f, d});
    add(p + "mlp.fc1.bias", {f});
    add(p + "mlp.fc2.weight", {d, f});
    add(p + "mlp.fc2.bias", {d});
  }
  add("final_ln.weight", {d});
  add("final_ln.bias", {d});
  if (!config.tie_embeddings) add("lm_head.weight", {v, d});
  return specs;
}

std::int64_t parameter_count(const ModelConfig& config) {
  std::int64_t total = 0;
  for (const ParamSpec& spec : parameter_specs(config)) total += spec.numel;
  return total;
}

}  // namespace policy
