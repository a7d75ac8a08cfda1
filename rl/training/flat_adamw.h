// training/flat_adamw.h: AdamW over the policy's one flat parameter buffer,
// with its whole state in two flat tensors (so a checkpoint is two entries).
//
// Contract
// - step(lr) gathers every parameter's gradient (an undefined gradient counts
//   as zero) into one flat gradient laid out like the buffer, clips it to
//   max_grad_norm (global L2 norm; <= 0 disables clipping), and updates the
//   buffer in place: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * decay * p),
//   where decay is 1 for parameters of rank >= 2 (matrices, embeddings) and
//   0 for biases and LayerNorm weights. Returns the gradient norm before
//   clipping. A non-finite gradient norm skips the update (nothing changes,
//   the step count does not advance) and is reported as such, so one bad
//   batch cannot poison the weights.
// - The optimizer keeps a reference to the model, which must outlive it and
//   keep its buffer (Transformer guarantees the buffer never moves).
// - state() / load_state() expose the moments and the step count; load_state
//   checks the sizes and returns an Error on mismatch (nothing changes).
// - Thread: one thread; no forward may overlap step() (it writes the buffer).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "policy/transformer.h"
#include "zorplex/result.h"

namespace training {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;
};

struct AdamWState {
  torch::Tensor exp_avg;     // flat, like the parameter buffer
  torch::Tensor exp_avg_sq;  // flat
  std::int64_t step = 0;
};

struct StepResult {
  double grad_norm = 0.0;  // before clipping
  bool applied = true;     // false: non-finite gradient, update skipped
};

class FlatAdamW {
 public:
  FlatAdamW(policy::Transformer& model, AdamWOptions options);

  StepResult step(double lr);
  const AdamWState& state() const { return state_; }
  zorplex::Result<bool> load_state(const AdamWState& state);
  const AdamWOptions& options() const { return options_; }

 private:
  torch::Tensor flat_gradient() const;

  policy::Transformer* model_;
  AdamWOptions options_;
  AdamWState state_;
  torch::Tensor decay_mask_;  // flat float: 1 where weight decay applies
};

}  // namespace training
