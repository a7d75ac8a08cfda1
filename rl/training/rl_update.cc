// training/rl_update.cc: see rl_update.h.
#include "training/rl_update.h"

#include <chrono>
#include <cmath>

#include "policy/sampling.h"
#include "training/token_batch.h"

namespace training {

RlUpdater::RlUpdater(policy::Transformer& model, RlUpdateOptions options)
    : model_(&model), options_(options), optimizer_(model, options.adamw) {}

zorplex::Result<RlUpdateReport> RlUpdater::update(
    const std::vector<algorithms::TrajectoryGroup>& groups) try {
  const auto start = std::chrono::steady_clock::now();
  std::vector<const rollout::Trajectory*> trajectories;
  std::vector<double> advantages;
  std::vector<double> rewards;
  RlUpdateReport report;
  for (const algorithms::TrajectoryGroup& group : groups) {
    const std::vector<double> group_rewards = group.rewards();
    std::vector<double> group_advantages;
    if (options_.baseline == BaselineKind::kGroupMean) {
      group_advantages = algorithms::group_advantages(group_rewards, options_.normalize_advantages);
    } else {
      for (double r : group_rewards) group_advantages.push_back(baseline_.advantage(r));
    }
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

  auto batch = make_token_batch(trajectories, model_->config().max_seq_len, model_->device());
  if (!batch) return batch.error();
  PolicyLossInputs in;
  in.behaviour_log_probs = batch.value().behaviour_log_probs;
  in.loss_mask = batch.value().loss_mask;
  in.advantages = torch::tensor(advantages, torch::kFloat64).to(torch::kFloat32).to(model_->device());
  if (options_.loss.decoupled) {
    torch::NoGradGuard no_grad;
    in.proximal_log_probs = batch_log_probs(*model_, batch.value(), options_.sampling_temperature);
  }
  model_->zero_grad();
  in.log_probs = batch_log_probs(*model_, batch.value(), options_.sampling_temperature);
  const PolicyLoss loss = policy_loss(in, options_.loss);
  loss.loss.backward();
  const StepResult step = optimizer_.step(options_.lr);
  model_->zero_grad();
  if (options_.baseline == BaselineKind::kRunningMean) baseline_.update(rewards);

  report.loss = loss.loss.item<double>();
  report.grad_norm = step.grad_norm;
  report.applied = step.applied;
  report.tokens = loss.tokens;
  report.capped_tokens = loss.capped_tokens;
  report.clipped_fraction = loss.clipped_fraction;
  report.mean_ratio = loss.mean_ratio;
  report.mean_behaviour_weight = loss.mean_behaviour_weight;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
} catch (const std::exception& e) {
  return zorplex::Error{std::string("RL update failed: ") + e.what()};
}

}  // namespace training
