// training/packed_batch.h: trajectories packed back to back into rows with
// segment ids (Marin's RlExample), so the RL update spends its forward passes
// on tokens rather than on right padding.
//
// Contract
// - make_packed_batch() places each trajectory, cut as make_token_batch()
//   cuts it (trainable_length(): the same rule and the same Errors), whole
//   in one row, first-fit decreasing by length: the longest first, each into
//   the first row with room, a new row when none has. A row holds at most
//   row_tokens tokens: options.row_tokens, raised to the longest (cut)
//   trajectory when smaller (0: rows as wide as the longest trajectory, so
//   no row is wider than the padded batch would be), never above
//   max_seq_len. The rows are as wide as the fullest one (L).
// - tokens [R, L] int64 (PAD after a row's last sequence); segment_ids
//   [R, L] int64: 0 = padding, 1..k = the row's sequences in order, each a
//   contiguous run (Transformer::forward_segments: attention stays inside a
//   segment and positions restart at its start). The per-target tensors are
//   [R, L-1] and describe token j + 1 (the target of position j), as in
//   TokenBatch: loss_mask float, behaviour_log_probs float, and
//   trajectory_index int64, the input index of the trajectory the target
//   belongs to. The target across a boundary (a sequence's last token ->
//   the next one's first, or -> padding) and padding belong to none:
//   trajectory_index -1, loss_mask 0, behaviour log-prob 0.
// - places[i] says where trajectory i went (row, offset, cut length);
//   target_tokens = loss_mask.sum(); real_tokens = the sum of the cut
//   lengths; padded_slots = R * L - real_tokens (the waste of packing, to
//   compare with make_token_batch's B * T - real_tokens).
// - per_target(batch, values[N]) spreads one value per trajectory over its
//   targets ([R, L-1], 0 where trajectory_index is -1): per-trajectory
//   advantages for policy_loss(). trajectory_targets(batch, x, i) is the
//   [length - 1] slice of a per-target tensor that belongs to trajectory i
//   (what batch_log_probs() row i of a one-trajectory batch holds).
// - packed_log_probs() is batch_log_probs() for a packed batch: [R, L-1],
//   each target's log-prob given its own sequence only; differentiable.
// - Tensors are created on device. Thread: plain functions; no shared state.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "policy/transformer.h"
#include "rollout/trajectory.h"
#include "zorplex/result.h"

namespace training {

struct PackOptions {
  std::int64_t max_seq_len = 512;  // the model's context: the cut and the widest row
  std::int64_t row_tokens = 0;     // row capacity; 0 or below the longest trajectory: the longest
};

struct PackedPlace {
  std::int64_t row = 0;
  std::int64_t offset = 0;  // the position of its first token in the row
  std::int64_t length = 0;  // tokens after the cut
};

struct PackedBatch {
  torch::Tensor tokens;               // [R, L] int64
  torch::Tensor segment_ids;          // [R, L] int64: 0 padding, 1..k
  torch::Tensor loss_mask;            // [R, L-1] float
  torch::Tensor behaviour_log_probs;  // [R, L-1] float
  torch::Tensor trajectory_index;     // [R, L-1] int64: -1 at boundaries and padding
  std::vector<PackedPlace> places;    // one per input trajectory
  std::int64_t target_tokens = 0;
  std::int64_t real_tokens = 0;
  std::int64_t padded_slots = 0;
};

zorplex::Result<PackedBatch> make_packed_batch(const std::vector<const rollout::Trajectory*>& trajectories,
                                               const PackOptions& options,
                                               torch::Device device = torch::kCPU);

torch::Tensor per_target(const PackedBatch& batch, const torch::Tensor& values);

torch::Tensor trajectory_targets(const PackedBatch& batch, const torch::Tensor& per_target_values,
                                 std::size_t index);

torch::Tensor packed_log_probs(const policy::Transformer& model, const PackedBatch& batch,
                               double temperature = 1.0);

}  // namespace training
