// trainer/budget_batch.cc: the trainer's batches under a token budget
// (Marin's v0 batcher, algorithms/token_budget_batcher.h) and the step line's
// per-environment metrics; see trainer_loop.h.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "trainer/trainer_loop.h"

namespace trainer {
namespace {

double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "compositional:easy" -> "easy"; other kinds as they are.
std::string short_name(const std::string& environment) {
  const std::string prefix = "compositional:";
  return environment.compare(0, prefix.size(), prefix) == 0 ? environment.substr(prefix.size()) : environment;
}

}  // namespace

std::vector<algorithms::TrajectoryGroup> TrainerLoop::take_plan(const algorithms::BatchPlan& plan) {
  spilled_.clear();
  for (const algorithms::EnvironmentPlan& e : plan.environments) {
    if (e.shortfall() > 0) spilled_[e.name] = e.shortfall();
  }
  return buffer_.take_planned(plan);
}

zorplex::Result<std::vector<algorithms::TrajectoryGroup>> TrainerLoop::collect_budget(
    const std::atomic<bool>& stop) {
  last_arrival_ = std::max(last_arrival_, steady_now() - 1.0);
  // Never longer than the idle timeout (batcher_choice.h caps it too).
  algorithms::SpillWait spill(std::min(options_.batcher.spill_wait_s, options_.idle_timeout_s));
  const std::uint64_t budget = options_.batcher.token_budget;
  double fitted = steady_now();  // when a queued group last fitted the budget (or none was queued)
  while (!stop.load()) {
    // Staleness first (supply drops the stale groups).
    const std::vector<algorithms::EnvironmentSupply> supply = buffer_.supply(version_);
    const algorithms::BatchPlan plan = algorithms::plan_batch(supply, options_.batcher);
    if (spill.ready(plan, steady_now())) return take_plan(plan);
    // A group larger than the whole budget is never taken: said once, and a
    // trainer that only ever gets such groups stops instead of waiting forever.
    std::uint64_t smallest = 0;
    for (const algorithms::EnvironmentSupply& s : supply) {
      for (std::uint64_t tokens : s.group_tokens) {
        smallest = smallest == 0 ? tokens : std::min(smallest, tokens);
        if (tokens > budget && !told_oversized_) {
          told_oversized_ = true;
          std::fprintf(
              stderr,
              "trainer: a %s group of %llu tokens is larger than --token-budget %llu: such groups are "
              "never trained on (raise --token-budget: a group of G trajectories can take G x "
              "max_seq_len tokens)\n",
              s.name.c_str(), static_cast<unsigned long long>(tokens),
              static_cast<unsigned long long>(budget));
        }
      }
    }
    if (plan.tokens > 0 || smallest == 0) fitted = steady_now();
    if (steady_now() - fitted > options_.idle_timeout_s) {
      return zorplex::Error{"for " + std::to_string(static_cast<int>(options_.idle_timeout_s)) +
                            " s no queued group fitted --token-budget " + std::to_string(budget) +
                            " (the smallest holds " + std::to_string(smallest) + " tokens): raise it"};
    }
    if (steady_now() - last_arrival_ > options_.idle_timeout_s) {
      return zorplex::Error{"no trajectories for " +
                            std::to_string(static_cast<int>(options_.idle_timeout_s)) +
                            " s: are the generators running (scripts/rl-run.sh starts them)?"};
    }
    (void)receive_one(false);
  }
  return std::vector<algorithms::TrajectoryGroup>{};
}

nlohmann::json TrainerLoop::environments_json(
    const std::map<std::string, algorithms::EnvironmentMetrics>& metrics) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, m] : metrics) {
    out[name] = {{"rollouts_in_buffer", m.rollouts_in_buffer},
                 {"tokens_in_buffer", m.tokens_in_buffer},
                 {"frac_on_policy", m.frac_on_policy},
                 {"new_rollouts", m.new_rollouts},
                 {"new_tokens", m.new_tokens},
                 {"new_generated_tokens", m.new_generated_tokens},
                 {"reward_mean", m.reward_mean},
                 {"reward_std", m.reward_std},
                 {"correct_rate", m.correct_rate},
                 {"frac_truncated", m.frac_truncated},
                 {"rollouts_used", m.rollouts_used},
                 {"tokens_used", m.tokens_used},
                 {"frac_used", m.frac_used},
                 {"spilled_tokens", m.spilled_tokens}};
  }
  return out;
}

std::string TrainerLoop::environments_console(
    const std::map<std::string, algorithms::EnvironmentMetrics>& metrics) {
  if (metrics.size() < 2) return "";
  std::string out = "  correct by env:";
  for (const auto& [name, m] : metrics) {
    char rate[32];
    if (m.new_rollouts > 0) {
      std::snprintf(rate, sizeof rate, " %.2f", m.correct_rate);
    } else {
      std::snprintf(rate, sizeof rate, " -");
    }
    out += " " + short_name(name) + rate;
  }
  return out;
}

}  // namespace trainer
