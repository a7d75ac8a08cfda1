// training/rl_update.h: one policy-gradient update of the RL trainer from a
// batch of trajectory groups.
//
// Contract
// - RlUpdater owns nothing but its options, the optimizer state and the
//   REINFORCE baseline; it borrows the model (which must outlive it) and
//   updates its flat buffer in place through FlatAdamW. It borrows the
//   reference policy of the KL term too (set_reference(); must outlive it,
//   same config and device; only read).
// - update(groups): advantages per trajectory (kGroupMean: r - mean of its
//   group, divided by the group's std when normalize_advantages, i.e. GRPO;
//   kLeaveOneOut: r - the mean of the rest of its group, i.e. RLOO, never
//   normalised; a group of fewer than 2 is an Error naming --min-group-size;
//   kRunningMean: r - b with RunningMeanBaseline, updated after the step);
//   log-probs are recomputed at the temperature the groups carry (the one
//   their behaviour log-probs were recorded at); groups at different
//   temperatures in one batch are an Error (the trainer's
//   algorithms::SamplingAgreement keeps them out);
//   the batch is split into options.minibatches minibatches (PPO epochs of
//   one pass); with the decoupled objective, the proximal log-probs of every
//   minibatch are computed first from the weights before the update (no
//   grad); then per minibatch: policy_loss() over its generated tokens,
//   backward, clip, one AdamW step at lr. With loss.kl_coef > 0 the
//   reference policy's log-probs (set_reference(); no grad) are computed
//   for every minibatch first too, and the loss pulls towards them
//   (policy_loss.h); update() refuses to run without a reference then.
//   From the second minibatch on, the
//   current policy differs from the behaviour and proximal ones, so ratios
//   leave 1 and the clip acts. The report's loss is the mean over
//   minibatches, its ratio and clip diagnostics token-weighted.
//   Returns what happened (loss, reward and accuracy statistics, clip and
//   behaviour-weight diagnostics, gradient norm, token counts, real and
//   padding slots). With options.pack_sequences every forward runs over
//   packed rows (packed_batch.h) instead: same loss, same update (to float
//   rounding), fewer padding slots.
// - Errors: an empty batch, inconsistent trajectories (token_batch.h) or a
//   torch failure come back as an Error; the weights are unchanged then.
// - Thread: one thread; no forward may run on the model concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/advantages.h"
#include "algorithms/replay_buffer.h"
#include "policy/transformer.h"
#include "training/flat_adamw.h"
#include "training/policy_loss.h"
#include "zorplex/result.h"

namespace training {

enum class BaselineKind { kGroupMean, kLeaveOneOut, kRunningMean };

struct RlUpdateOptions {
  PolicyLossOptions loss;
  BaselineKind baseline = BaselineKind::kGroupMean;
  bool normalize_advantages = true;  // GRPO (kGroupMean only); divides by the group's std
  double lr = 1e-4;
  // PPO minibatches: the batch is split into this many (trajectory i into
  // minibatch i % minibatches), one optimizer step each; 1 = one step.
  int minibatches = 1;
  // Step credit (algorithms/step_credit.h): each trajectory's advantage
  // applies only to its credited tokens: from its first wrong arithmetic
  // step on when negative, before it when positive; the whole trajectory
  // when no checkable step is wrong. The token mean of the loss is over the
  // credited tokens. false: outcome credit (every generated token).
  bool step_credit = false;
  // Every forward of the update (current, proximal, reference policies) runs
  // over packed rows with segment ids (packed_batch.h) instead of the
  // right-padded batch: the same loss and update to float rounding, fewer
  // padding slots. pack_row_tokens: PackOptions::row_tokens (0: rows as wide
  // as the minibatch's longest trajectory).
  bool pack_sequences = false;
  std::int64_t pack_row_tokens = 0;
  AdamWOptions adamw;
};

struct RlUpdateReport {
  double loss = 0.0;
  double grad_norm = 0.0;
  bool applied = true;
  int trajectories = 0;
  std::int64_t tokens = 0;  // generated tokens in the loss
  std::int64_t capped_tokens = 0;
  // Over the minibatches: tokens of the trajectories (after the cut), and the
  // padding slots the forwards ran over besides them (B * T - real padded,
  // R * L - real packed).
  std::int64_t real_tokens = 0;
  std::int64_t padded_tokens = 0;
  double reward_mean = 0.0;
  double reward_std = 0.0;
  double correct_rate = 0.0;
  double format_rate = 0.0;  // answer from an [ANSWER] tag
  double advantage_abs_mean = 0.0;
  double clipped_fraction = 0.0;
  double mean_ratio = 1.0;
  double mean_behaviour_weight = 1.0;
  double kl = 0.0;           // token-weighted k3 estimate of KL(current || reference); 0 without the term
  double temperature = 1.0;  // the groups' sampling temperature the log-probs were computed at
  int minibatches = 1;       // optimizer steps taken (grad_norm is the largest of them)
  std::int64_t uncredited_tokens = 0;  // generated tokens step credit left out (0 without it)
  double seconds = 0.0;
};

class RlUpdater {
 public:
  RlUpdater(policy::Transformer& model, RlUpdateOptions options);

  zorplex::Result<RlUpdateReport> update(const std::vector<algorithms::TrajectoryGroup>& groups);

  const RlUpdateOptions& options() const { return options_; }
  // The learning rate of the next update() (a schedule sets it per step).
  void set_lr(double lr) { options_.lr = lr; }
  // The policy the KL term pulls towards (loss.kl_coef > 0), e.g. the warm start.
  void set_reference(const policy::Transformer* reference) { reference_ = reference; }
  FlatAdamW& optimizer() { return optimizer_; }
  algorithms::RunningMeanBaseline& baseline() { return baseline_; }

 private:
  policy::Transformer* model_;
  const policy::Transformer* reference_ = nullptr;
  RlUpdateOptions options_;
  FlatAdamW optimizer_;
  algorithms::RunningMeanBaseline baseline_;
};

}  // namespace training
