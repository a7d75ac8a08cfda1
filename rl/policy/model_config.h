// policy/model_config.h: the shape of the policy transformer and the layout
// of its parameters in the one contiguous float32 buffer.
//
// Contract
// - ModelConfig is a plain value. validate() says what is wrong with it, or
//   nothing; every other function here assumes a valid config.
// - to_map()/from_map() carry a config through string metadata (the
//   safetensors __metadata__): every field under its own key, integers in
//   decimal, layer_norm_eps and rope_theta as "%.17g" (exact round trip).
//   from_map() ignores keys it does not know, fails on a missing or
//   malformed one, and validates the result.
// - parameter_specs() is the single source of truth for the layout of the
//   parameters (docs/policy.md has the table for the default config): the
//   order, names, shapes and offsets of every parameter in the flat buffer,
//   packed back to back with no padding. It needs no libtorch, so code that
//   only moves weights (a weight-sync layout) can use it.
// - Pure functions; safe from any thread. No libtorch here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "zorplex/result.h"

namespace policy {

enum class PositionEncoding {
  kLearned,  // a learned [max_seq_len, d_model] table added to the token embedding
  kRotary,   // RoPE on queries and keys in every attention layer (no parameters)
};
const char* position_encoding_name(PositionEncoding positions);  // "learned", "rotary"

struct ModelConfig {
  std::int64_t vocab_size = 261;  // the byte tokenizer's (tokenizer.h)
  std::int64_t d_model = 128;
  std::int64_t n_layers = 4;
  std::int64_t n_heads = 4;
  std::int64_t d_ff = 512;
  std::int64_t max_seq_len = 512;
  PositionEncoding positions = PositionEncoding::kLearned;
  // The output projection is the token embedding (GPT-2 style): no separate
  // lm_head.weight parameter.
  bool tie_embeddings = true;
  double layer_norm_eps = 1e-5;
  double rope_theta = 10000.0;  // used with kRotary only

  std::int64_t head_dim() const { return d_model / n_heads; }

  // What is wrong with this config, in words; nullopt when it is valid.
  std::optional<std::string> validate() const;

  std::map<std::string, std::string> to_map() const;
  static zorplex::Result<ModelConfig> from_map(const std::map<std::string, std::string>& map);

  bool operator==(const ModelConfig& other) const;
  bool operator!=(const ModelConfig& other) const { return !(*this == other); }
};

// One parameter's place in the flat float32 buffer.
struct ParamSpec {
  std::string name;                 // e.g. "layers.0.attn.qkv.weight"
  std::vector<std::int64_t> shape;  // row-major
  std::int64_t numel = 0;
  std::int64_t offset = 0;       // in elements from the start of the buffer
  std::int64_t byte_offset = 0;  // offset * sizeof(float)
};

// The parameters of a (valid) config, in buffer order:
//   tok_embedding.weight [V, D]
//   pos_embedding.weight [max_seq_len, D]            (kLearned only)
//   per layer i: layers.i.ln1.{weight,bias} [D], layers.i.attn.qkv.weight [3D, D],
//     layers.i.attn.qkv.bias [3D], layers.i.attn.out.weight [D, D], layers.i.attn.out.bias [D],
//     layers.i.ln2.{weight,bias} [D], layers.i.mlp.fc1.weight [F, D], layers.i.mlp.fc1.bias [F],
//     layers.i.mlp.fc2.weight [D, F], layers.i.mlp.fc2.bias [D]
//   final_ln.{weight,bias} [D]
//   lm_head.weight [V, D]                            (untied only)
// Linear weights are [out, in] (torch::linear's convention). The qkv rows are
// queries, then keys, then values, each [D, D] with head h in rows h*Dh..(h+1)*Dh.
std::vector<ParamSpec> parameter_specs(const ModelConfig& config);

// The sum of numel over parameter_specs(config).
std::int64_t parameter_count(const ModelConfig& config);

}  // namespace policy
