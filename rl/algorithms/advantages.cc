// algorithms/advantages.cc: see advantages.h.
#include "algorithms/advantages.h"

#include <cmath>
#include <string>

namespace algorithms {

bool zero_variance(const std::vector<double>& rewards) {
  for (double r : rewards) {
    if (std::abs(r - rewards.front()) > 1e-12) return false;
  }
  return true;
}

std::vector<double> group_advantages(const std::vector<double>& rewards, bool normalize, double eps) {
  std::vector<double> out(rewards.size(), 0.0);
  if (rewards.size() < 2 || zero_variance(rewards)) return out;
  double mean = 0.0;
  for (double r : rewards) mean += r;
  mean /= static_cast<double>(rewards.size());
  double variance = 0.0;
  for (double r : rewards) variance += (r - mean) * (r - mean);
  variance /= static_cast<double>(rewards.size());
  const double scale = normalize ? 1.0 / (std::sqrt(variance) + eps) : 1.0;
  for (std::size_t i = 0; i < rewards.size(); ++i) out[i] = (rewards[i] - mean) * scale;
  return out;
}

zorplex::Result<std::vector<double>> leave_one_out_advantages(const std::vector<double>& rewards) {
  if (rewards.size() < 2) {
    return zorplex::Error{"leave-one-out (RLOO) advantages need a group of at least 2 trajectories, got " +
                          std::to_string(rewards.size()) +
                          ": the baseline is the mean of the others (keep --min-group-size at 2 or more, "
                          "or sample more episodes per prompt with the generators' --group-size)"};
  }
  std::vector<double> out(rewards.size(), 0.0);
  if (zero_variance(rewards)) return out;
  double sum = 0.0;
  for (double r : rewards) sum += r;
  const double others = static_cast<double>(rewards.size() - 1);
  for (std::size_t i = 0; i < rewards.size(); ++i) out[i] = rewards[i] - (sum - rewards[i]) / others;
  return out;
}

void RunningMeanBaseline::update(const std::vector<double>& batch_rewards) {
  if (batch_rewards.empty()) return;
  double mean = 0.0;
  for (double r : batch_rewards) mean += r;
  mean /= static_cast<double>(batch_rewards.size());
  value_ = initialized_ ? decay_ * value_ + (1.0 - decay_) * mean : mean;
  initialized_ = true;
}

}  // namespace algorithms
