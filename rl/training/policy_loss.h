// training/policy_loss.h: the policy-gradient losses of the RL trainer:
// REINFORCE, the PPO/GRPO clipped objective against the behaviour policy,
// and AReaL's decoupled objective with a capped behaviour weight.
//
// Contract (per token t with loss_mask 1, advantage A of its sequence)
// - kReinforce:  l_t = -A * logp_t  (the current log-prob; on-policy).
// - kPpoClip:    r_t = exp(logp_t - base_t),
//                l_t = -min(r_t A, clip(r_t, 1 - eps, 1 + eps) A),
//   with base = the behaviour log-probs recorded at generation, or, when
//   decoupled, the proximal log-probs (the trainer's weights before this
//   update). Decoupled also multiplies l_t by the behaviour weight
//   w_t = exp(prox_t - behav_t) (no gradient through it) and, with
//   behaviour_weight_cap > 0, leaves out tokens with w_t > cap (AReaL's
//   behav_imp_weight_cap).
// - loss = sum of l_t over the tokens kept / their number (a token mean over
//   the batch); 0 with no token kept.
// - With kl_coef > 0 (and reference_log_probs given), the loss adds
//   kl_coef * the token mean of k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1
//   over the same tokens: the unbiased, never negative estimate of
//   KL(current || reference) that GRPO uses, whose gradient pulls each
//   sampled token's log-prob back towards the reference policy's (e.g. the
//   warm start, so that RL does not unlearn what the start had right).
//   `kl` reports that token mean (0 without a reference).
// - Diagnostics over the kept tokens: the share where the clip was active
//   (A > 0 and r > 1 + eps, or A < 0 and r < 1 - eps), mean ratio, mean
//   behaviour weight; tokens left out by the cap.
// - Inputs: log_probs [B, N] (differentiable), behaviour_log_probs,
//   proximal_log_probs (decoupled only), reference_log_probs (kl_coef > 0
//   only) and loss_mask [B, N], advantages
//   [B] (one per sequence), or [B, N] (one per target: a packed batch's
//   per_target(), packed_batch.h). Mismatched shapes throw c10::Error
//   (torch), a programming error.
// - Pure function of its inputs; any thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "zorplex/result.h"

namespace training {

enum class Objective { kReinforce, kPpoClip };
const char* objective_name(Objective objective);  // "reinforce", "ppo_clip"

struct PolicyLossOptions {
  Objective objective = Objective::kPpoClip;
  double clip_epsilon = 0.2;
  bool decoupled = false;
  double behaviour_weight_cap = 0.0;  // 0: no cap
  double kl_coef = 0.0;               // 0: no KL term (reference_log_probs unused)
};

struct PolicyLossInputs {
  torch::Tensor log_probs;
  torch::Tensor behaviour_log_probs;
  torch::Tensor proximal_log_probs;
  torch::Tensor reference_log_probs;
  torch::Tensor loss_mask;
  torch::Tensor advantages;
};

struct PolicyLoss {
  torch::Tensor loss;  // scalar
  std::int64_t tokens = 0;
  std::int64_t capped_tokens = 0;
  double clipped_fraction = 0.0;
  double mean_ratio = 1.0;
  double mean_behaviour_weight = 1.0;
  double kl = 0.0;  // token mean of k3 against the reference (0 without one)
};

PolicyLoss policy_loss(const PolicyLossInputs& inputs, const PolicyLossOptions& options);

}  // namespace training
