// training/rl_update.cc: see rl_update.h.
#include "training/rl_update.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "algorithms/step_credit.h"
#include "policy/sampling.h"
#include "training/packed_batch.h"
#include "training/token_batch.h"

namespace training {

namespace {

// One group's advantages under the chosen baseline (rl_update.h).
zorplex::Result<std::vector<double>> advantages_of(const algorithms::TrajectoryGroup& group,
                                                   const std::vector<double>& rewards,
                                                   const RlUpdateOptions& options,
                                                   const algorithms::RunningMeanBaseline& baseline) {
  switch (options.baseline) {
    case BaselineKind::kGroupMean: return algorithms::group_advantages(rewards, options.normalize_advantages);
    case BaselineKind::kLeaveOneOut: {
      auto leave_one_out = algorithms::leave_one_out_advantages(rewards);
      if (!leave_one_out) {
        return zorplex::Error{"group " + std::to_string(group.sequence) + " of generator " +
                              std::to_string(group.generator) + ": " + leave_one_out.error().message};
      }
      return leave_one_out;
    }
    case BaselineKind::kRunningMean: break;
  }
  std::vector<double> out;
  for (double r : rewards) out.push_back(baseline.advantage(r));
  return out;
}

// One minibatch as the loss sees it: right-padded [B, T-1] per-target
// tensors, or packed [R, L-1] ones (options.pack_sequences).
struct Minibatch {
  bool packed = false;
  TokenBatch padded_batch;
  PackedBatch packed_batch;
  torch::Tensor loss_mask, behaviour, advantages, proximal, reference;
  std::int64_t real_tokens = 0, padded_slots = 0;
  std::int64_t uncredited_tokens = 0;  // generated targets step credit left out

  torch::Tensor log_probs(const policy::Transformer& model, double temperature) const {
    return packed ? packed_log_probs(model, packed_batch, temperature)
                  : batch_log_probs(model, padded_batch, temperature);
  }
};

zorplex::Result<Minibatch> make_minibatch(const std::vector<const rollout::Trajectory*>& members,
                                          const std::vector<double>& member_advantages,
                                          const RlUpdateOptions& options, const policy::Transformer& model) {
  Minibatch mb;
  mb.packed = options.pack_sequences;
  const torch::Tensor advantages =
      torch::tensor(member_advantages, torch::kFloat64).to(torch::kFloat32).to(model.device());
  if (mb.packed) {
    auto batch = make_packed_batch(members, PackOptions{model.config().max_seq_len, options.pack_row_tokens},
                                   model.device());
    if (!batch) return batch.error();
    mb.packed_batch = std::move(batch).value();
    mb.loss_mask = mb.packed_batch.loss_mask;
    mb.behaviour = mb.packed_batch.behaviour_log_probs;
    mb.advantages = per_target(mb.packed_batch, advantages);
    mb.real_tokens = mb.packed_batch.real_tokens;
    mb.padded_slots = mb.packed_batch.padded_slots;
  } else {
    auto batch = make_token_batch(members, model.config().max_seq_len, model.device());
    if (!batch) return batch.error();
    mb.padded_batch = std::move(batch).value();
    mb.loss_mask = mb.padded_batch.loss_mask;
    mb.behaviour = mb.padded_batch.behaviour_log_probs;
    mb.advantages = advantages;
    mb.real_tokens = mb.padded_batch.attention_mask.sum().item<std::int64_t>();
    mb.padded_slots = mb.padded_batch.attention_mask.numel() - mb.real_tokens;
  }
  if (options.step_credit) {
    // algorithms/step_credit.h: each trajectory's advantage reaches only its
    // credited tokens. Target column c of its row is its token c - offset + 1
    // (offset 0 in the padded layout, row b).
    torch::Tensor credit = torch::zeros(mb.loss_mask.sizes());
    for (std::size_t b = 0; b < members.size(); ++b) {
      const auto [begin, end] = algorithms::credited_tokens(*members[b], member_advantages[b]);
      const std::int64_t row = mb.packed ? mb.packed_batch.places[b].row : static_cast<std::int64_t>(b);
      const std::int64_t offset = mb.packed ? mb.packed_batch.places[b].offset : 0;
      const std::int64_t length = mb.packed ? mb.packed_batch.places[b].length : credit.size(1) + 1;
      const std::int64_t first = offset + std::max<std::int64_t>(static_cast<std::int64_t>(begin) - 1, 0);
      const std::int64_t last = offset + std::min<std::int64_t>(static_cast<std::int64_t>(end) - 1, length - 1);
      if (last > first) credit[row].slice(0, first, last).fill_(1.0);
    }
    credit = credit.to(mb.loss_mask.device());
    mb.uncredited_tokens = static_cast<std::int64_t>((mb.loss_mask * (1 - credit)).sum().item<double>());
    mb.loss_mask = mb.loss_mask * credit;
  }
  return mb;
}

}  // namespace

RlUpdater::RlUpdater(policy::Transformer& model, RlUpdateOptions options)
    : model_(&model), options_(options), optimizer_(model, options.adamw) {}

zorplex::Result<RlUpdateReport> RlUpdater::update(
    const std::vector<algorithms::TrajectoryGroup>& groups) try {
  const auto start = std::chrono::steady_clock::now();
  std::vector<const rollout::Trajectory*> trajectories;
  std::vector<double> advantages;
  std::vector<double> rewards;
  RlUpdateReport report;
  if (groups.empty()) return zorplex::Error{"an RL update needs at least one trajectory"};
  if (options_.loss.kl_coef > 0.0 && reference_ == nullptr)
    return zorplex::Error{
        "an RL update with a KL term (kl_coef > 0) needs a reference policy (set_reference)"};
  const double temperature = groups.front().temperature;
  for (const algorithms::TrajectoryGroup& group : groups) {
    if (group.temperature != temperature) {
      return zorplex::Error{"an RL update's groups were sampled at different temperatures (" +
                            std::to_string(temperature) + " and " + std::to_string(group.temperature) +
                            "): their log-probs cannot be recomputed together"};
    }
  }
  report.temperature = temperature;
  for (const algorithms::TrajectoryGroup& group : groups) {
    const std::vector<double> group_rewards = group.rewards();
    auto computed = advantages_of(group, group_rewards, options_, baseline_);
    if (!computed) return computed.error();
    const std::vector<double>& group_advantages = computed.value();
    for (std::size_t i = 0; i < group.trajectories.size(); ++i) {
      const rollout::Trajectory& t = group.trajectories[i];
      trajectories.push_back(&t);
      advantages.push_back(group_advantages[i]);
      rewards.push_back(group_rewards[i]);
      report.correct_rate += t.score.correct ? 1 : 0;
      report.format_rate += t.score.extraction.rule == zorplex::ExtractionRule::kAnswerTag ? 1 : 0;
      report.advantage_abs_mean += std::abs(group_advantages[i]);
    }
  }
  if (trajectories.empty()) return zorplex::Error{"an RL update needs at least one trajectory"};
  const double n = static_cast<double>(trajectories.size());
  report.trajectories = static_cast<int>(trajectories.size());
  report.correct_rate /= n;
  report.format_rate /= n;
  report.advantage_abs_mean /= n;
  for (double r : rewards) report.reward_mean += r / n;
  for (double r : rewards) report.reward_std += (r - report.reward_mean) * (r - report.reward_mean) / n;
  report.reward_std = std::sqrt(report.reward_std);

  // PPO minibatches (AReaL's ppo_n_minibatches): trajectory i goes to
  // minibatch i % m, one optimizer step each. The proximal log-probs are
  // taken from the weights before the first step, so from the second
  // minibatch on current, proximal and behaviour policies all differ.
  const std::size_t m =
      std::min<std::size_t>(static_cast<std::size_t>(std::max(options_.minibatches, 1)), trajectories.size());
  std::vector<Minibatch> minibatches;
  for (std::size_t k = 0; k < m; ++k) {
    std::vector<const rollout::Trajectory*> members;
    std::vector<double> member_advantages;
    for (std::size_t i = k; i < trajectories.size(); i += m) {
      members.push_back(trajectories[i]);
      member_advantages.push_back(advantages[i]);
    }
    auto made = make_minibatch(members, member_advantages, options_, *model_);
    if (!made) return made.error();
    Minibatch mb = std::move(made).value();
    report.uncredited_tokens += mb.uncredited_tokens;
    if (options_.loss.decoupled) {
      torch::NoGradGuard no_grad;
      mb.proximal = mb.log_probs(*model_, temperature);
    }
    if (options_.loss.kl_coef > 0.0) {
      torch::NoGradGuard no_grad;
      mb.reference = mb.log_probs(*reference_, temperature);
    }
    report.real_tokens += mb.real_tokens;
    report.padded_tokens += mb.padded_slots;
    minibatches.push_back(std::move(mb));
  }
  double token_weighted_clip = 0.0, token_weighted_ratio = 0.0, token_weighted_weight = 0.0,
         token_weighted_kl = 0.0, loss_sum = 0.0;
  report.applied = true;
  for (Minibatch& mb : minibatches) {
    PolicyLossInputs in;
    in.behaviour_log_probs = mb.behaviour;
    in.loss_mask = mb.loss_mask;
    in.advantages = mb.advantages;
    in.proximal_log_probs = mb.proximal;
    in.reference_log_probs = mb.reference;
    model_->zero_grad();
    in.log_probs = mb.log_probs(*model_, temperature);
    const PolicyLoss loss = policy_loss(in, options_.loss);
    loss.loss.backward();
    const StepResult step = optimizer_.step(options_.lr);
    model_->zero_grad();
    const double tokens = static_cast<double>(loss.tokens);
    loss_sum += loss.loss.item<double>();
    report.grad_norm = std::max(report.grad_norm, step.grad_norm);
    report.applied = report.applied && step.applied;
    report.tokens += loss.tokens;
    report.capped_tokens += loss.capped_tokens;
    token_weighted_clip += loss.clipped_fraction * tokens;
    token_weighted_ratio += loss.mean_ratio * tokens;
    token_weighted_weight += loss.mean_behaviour_weight * tokens;
    token_weighted_kl += loss.kl * tokens;
  }
  if (options_.baseline == BaselineKind::kRunningMean) baseline_.update(rewards);
  report.minibatches = static_cast<int>(minibatches.size());
  report.loss = loss_sum / static_cast<double>(minibatches.size());
  if (report.tokens > 0) {
    const double tokens = static_cast<double>(report.tokens);
    report.clipped_fraction = token_weighted_clip / tokens;
    report.mean_ratio = token_weighted_ratio / tokens;
    report.mean_behaviour_weight = token_weighted_weight / tokens;
    report.kl = token_weighted_kl / tokens;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
} catch (const std::exception& e) {
  return zorplex::Error{std::string("RL update failed: ") + e.what()};
}

}  // namespace training
