// policy/transformer.h: the Zorplex policy, a small decoder-only pre-norm
// transformer whose parameters all live in one contiguous float32 buffer.
//
// Contract
// - Parameters. flat_parameters() is one 1-D float32 tensor (contiguous,
//   requires_grad false) holding every parameter back to back in the order
//   and at the offsets of parameter_specs(config()) (model_config.h).
//   parameters()[i] is a tensor over the same storage at specs()[i].offset
//   with specs()[i].shape, requires_grad true and a leaf, so an optimizer over
//   parameters() (e.g. torch::optim::AdamW) updates the flat buffer in place,
//   and anything written into the flat buffer (a weight-sync pull, a load) is
//   what the next forward uses. The buffer never moves or changes size for
//   the life of the model. Gradients are separate tensors (p.grad()).
// - Architecture (docs/policy.md): token embedding (+ learned positions, or
//   RoPE in attention), n_layers x [LayerNorm -> causal multi-head
//   self-attention -> residual, LayerNorm -> MLP with GELU (erf) -> residual],
//   final LayerNorm, output projection = the token embedding when
//   tie_embeddings (the default), else lm_head.weight.
// - forward(tokens[B,T], mask[B,T]) gives logits [B,T,V] (teacher forcing).
//   mask (bool or integer, 1 = real token) is optional; masked positions are
//   never attended to by real tokens, and each real token's position id is
//   the number of real tokens before it in its row, so left or right padding
//   gives the same logits at real positions as the unpadded row.
//   forward_step(tokens[B,t], cache, mask) does the same for t new tokens
//   after what the cache holds, appends their keys and values to the cache and
//   returns their logits [B,t,V]; a sequence fed in pieces gives the logits of
//   one forward() over the whole (to float rounding). Both record autograd
//   when grad mode is on; generation wraps them in torch::NoGradGuard.
// - forward_segments(tokens[B,T], segment_ids[B,T]) is forward() over packed
//   rows (training/packed_batch.h): segment_ids (integer) is 0 for padding
//   and 1..k for the sequences laid back to back in the row, each a
//   contiguous run. A token attends only to earlier tokens of its own run
//   (causal), and position ids restart at 0 where a run starts (learned
//   positions and rotary alike), so each sequence's logits equal those of a
//   forward() over it alone (to float rounding). Padding tokens attend to
//   themselves only; their logits mean nothing. forward()/forward_step()
//   take no segments and run exactly as before.
// - Errors: create()/wrap() return an Error for an invalid config or buffer.
//   forward()/forward_step() are torch code: bad shapes, token ids outside
//   the vocabulary, positions past max_seq_len or a cache of another batch
//   size throw c10::Error, like any torch op.
// - Threads: forward()/forward_step() only read the parameters and may run
//   concurrently with each other (each call with its own cache); writes into
//   the buffer (optimizer step, pull, load) must not overlap with them.
// - A Transformer owns its buffer (or shares the one given to wrap()); it is
//   movable, not copyable (a copy would alias the parameters).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "policy/model_config.h"
#include "zorplex/result.h"

namespace policy {

// Per-layer keys and values of the tokens fed so far, for incremental decoding.
struct KVCache {
  std::vector<torch::Tensor> keys;    // per layer [B, n_heads, length, head_dim]
  std::vector<torch::Tensor> values;  // per layer, same shape
  torch::Tensor valid;                // [B, length] bool: which cached positions are real tokens
  torch::Tensor next_position;        // [B] int64: the position id of each row's next real token

  std::int64_t length() const { return valid.defined() ? valid.size(1) : 0; }
  std::int64_t batch_size() const { return valid.defined() ? valid.size(0) : 0; }
  bool empty() const { return !valid.defined(); }
  // Keeps only the given batch rows (int64 indices), in that order (drop
  // finished sequences from a batch).
  void keep_rows(const torch::Tensor& rows);
};

class Transformer {
 public:
  // A model with a freshly allocated buffer on device, initialised from seed:
  // weights ~ normal(0, 0.02) (embeddings included), biases 0, LayerNorm
  // weights 1, each parameter drawn in buffer order from one CPU generator.
  static zorplex::Result<Transformer> create(const ModelConfig& config, std::uint64_t seed = 0,
                                             torch::Device device = torch::kCPU);
  // A model over an existing buffer (e.g. memory a weight-sync pull fills):
  // 1-D, contiguous, float32, exactly parameter_count(config) elements. The
  // values are used as they are.
  static zorplex::Result<Transformer> wrap(const ModelConfig& config, torch::Tensor flat);

  Transformer(Transformer&&) = default;
  Transformer& operator=(Transformer&&) = default;
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return config_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  torch::Tensor flat_parameters() const { return flat_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  // The parameter called name; an undefined tensor if there is none.
  torch::Tensor parameter(const std::string& name) const;
  torch::Device device() const { return flat_.device(); }

  // Re-initialises every parameter in place from seed (as create()).
  void initialize(std::uint64_t seed);
  // Resets every parameter's gradient to undefined.
  void zero_grad();

  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& mask = {}) const;
  torch::Tensor forward_step(const torch::Tensor& tokens, KVCache& cache,
                             const torch::Tensor& mask = {}) const;
  torch::Tensor forward_segments(const torch::Tensor& tokens, const torch::Tensor& segment_ids) const;

 private:
  struct Layer {
    torch::Tensor ln1_w, ln1_b, qkv_w, qkv_b, out_w, out_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  Transformer(const ModelConfig& config, torch::Tensor flat);
  // segments: undefined, or forward_segments()' ids (then no mask, no cache).
  torch::Tensor run(const torch::Tensor& tokens, const torch::Tensor& mask, KVCache* cache,
                    const torch::Tensor& segments = {}) const;
  torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin) const;

  ModelConfig config_;
  std::vector<ParamSpec> specs_;
  torch::Tensor flat_;
  std::vector<torch::Tensor> params_;
  torch::Tensor tok_emb_, pos_emb_, final_w_, final_b_, head_w_;
  std::vector<Layer> layers_;
  torch::Tensor rope_cos_, rope_sin_;  // [max_seq_len, head_dim / 2], kRotary only
};

}  // namespace policy
