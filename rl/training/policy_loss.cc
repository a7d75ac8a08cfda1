// training/policy_loss.cc: see policy_loss.h.
#include "training/policy_loss.h"

namespace training {

const char* objective_name(Objective objective) {
  return objective == Objective::kReinforce ? "reinforce" : "ppo_clip";
}

PolicyLoss policy_loss(const PolicyLossInputs& in, const PolicyLossOptions& options) {
  PolicyLoss out;
  // One per sequence [B], or already one per target (a packed batch).
  const torch::Tensor per_sequence = in.advantages.to(in.log_probs.dtype());
  const torch::Tensor advantages =
      per_sequence.dim() == 1 ? per_sequence.unsqueeze(1).expand_as(in.log_probs) : per_sequence;
  torch::Tensor mask = in.loss_mask.to(in.log_probs.dtype());
  torch::Tensor per_token;
  if (options.objective == Objective::kReinforce) {
    per_token = -advantages * in.log_probs;
  } else {
    torch::Tensor base = in.behaviour_log_probs;
    torch::Tensor weight;
    if (options.decoupled) {
      base = in.proximal_log_probs;
      weight = (in.proximal_log_probs - in.behaviour_log_probs).exp().detach();
      if (options.behaviour_weight_cap > 0.0) {
        const torch::Tensor within = (weight <= options.behaviour_weight_cap).to(mask.dtype());
        out.capped_tokens = static_cast<std::int64_t>((mask * (1 - within)).sum().item<double>());
        mask = mask * within;
      }
    }
    const torch::Tensor ratio = (in.log_probs - base.detach()).exp();
    const torch::Tensor clipped = ratio.clamp(1.0 - options.clip_epsilon, 1.0 + options.clip_epsilon);
    per_token = -torch::min(ratio * advantages, clipped * advantages);
    const torch::Tensor clip_active = ((advantages > 0) & (ratio > 1.0 + options.clip_epsilon)) |
                                      ((advantages < 0) & (ratio < 1.0 - options.clip_epsilon));
    const double kept = mask.sum().item<double>();
    if (kept > 0) {
      out.clipped_fraction = (clip_active.to(mask.dtype()) * mask).sum().item<double>() / kept;
      out.mean_ratio = (ratio.detach() * mask).sum().item<double>() / kept;
      if (weight.defined()) out.mean_behaviour_weight = (weight * mask).sum().item<double>() / kept;
    }
    if (weight.defined()) per_token = per_token * weight;
  }
  const double kept = mask.sum().item<double>();
  out.tokens = static_cast<std::int64_t>(kept);
  if (options.kl_coef > 0.0) {
    TORCH_CHECK(in.reference_log_probs.defined(), "policy_loss: kl_coef > 0 needs reference_log_probs");
    const torch::Tensor log_ratio = in.reference_log_probs.detach() - in.log_probs;
    const torch::Tensor k3 = log_ratio.exp() - log_ratio - 1.0;
    if (kept > 0) out.kl = (k3.detach() * mask).sum().item<double>() / kept;
    per_token = per_token + options.kl_coef * k3;
  }
  out.loss = (per_token * mask).sum() / std::max(kept, 1.0);
  return out;
}

}  // namespace training
