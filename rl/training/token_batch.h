// training/token_batch.h: trajectories as padded tensors, and the masked
// token loss over them (shared by SFT and the RL trainer).
//
// Contract
// - make_token_batch() right-pads B trajectories to the longest one with PAD.
//   tokens [B, T] int64; attention_mask [B, T] bool (real tokens); the
//   per-target tensors are [B, T - 1] and describe token j + 1 (the target of
//   position j, as policy::sequence_log_probs): loss_mask float (1 where the
//   model generated the target), behaviour_log_probs float.
//   A trajectory longer than max_seq_len is cut to max_seq_len tokens; that
//   is allowed only when every token cut off is masked (an injected result
//   past the end of the context), otherwise it is an Error. An empty list, or
//   a trajectory with fewer than 2 tokens, is an Error too.
// - masked_mean_nll() is the SFT loss: the mean of -log p(target) over the
//   targets with loss_mask 1 (temperature 1); differentiable. A batch with
//   no masked-in target gives 0 (with a zero gradient), not NaN. With
//   denominator > 0 the sum is divided by it instead (a micro-batch's share
//   of a larger batch's mean).
// - Tensors are created on device. Thread: plain functions; no shared state.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "policy/transformer.h"
#include "rollout/trajectory.h"
#include "zorplex/result.h"

namespace training {

struct TokenBatch {
  torch::Tensor tokens;               // [B, T] int64
  torch::Tensor attention_mask;       // [B, T] bool
  torch::Tensor loss_mask;            // [B, T-1] float
  torch::Tensor behaviour_log_probs;  // [B, T-1] float
  std::int64_t target_tokens = 0;     // loss_mask.sum()
};

// The tokens of trajectory t (index `index` in its batch, for the message)
// that a batch holds: all of them, or max_seq_len when it is longer (the cut
// rule above; an Error when a cut-off token is generated, when tokens, mask
// and log-probs differ in length, or with fewer than 2 tokens).
zorplex::Result<std::int64_t> trainable_length(const rollout::Trajectory& t, std::size_t index,
                                               std::int64_t max_seq_len);

zorplex::Result<TokenBatch> make_token_batch(const std::vector<const rollout::Trajectory*>& trajectories,
                                             std::int64_t max_seq_len, torch::Device device = torch::kCPU);

// Teacher-forced log-probs [B, T-1] of each target (policy::sequence_log_probs).
torch::Tensor batch_log_probs(const policy::Transformer& model, const TokenBatch& batch,
                              double temperature = 1.0);

torch::Tensor masked_mean_nll(const policy::Transformer& model, const TokenBatch& batch,
                              std::int64_t denominator = 0);

}  // namespace training
