// algorithms/environment_buffers.h: the trainer's replay buffer as one queue
// per environment (Marin's ReplayBuffer per env type, seed 001), with the
// rules and counters of algorithms/replay_buffer.h and Marin's metrics per
// environment.
//
// Contract
// - An environment is environment_of(group): the task kind and difficulty of
//   its first trajectory, spelled as the generator's --task flag
//   ("compositional:easy", "simple"; algorithms/token_budget_batcher.h).
//   A group's tokens are its trajectories' (prompt, generated and injected
//   tool results: the sequence trained on), each capped at max_seq_len
//   (0: no cap).
// - add(group): queues it in its environment's queue, stamped with its
//   arrival, and counts it (received, and this step's new_* metrics).
//   capacity_groups bounds all queues together: the oldest group of any
//   environment is pushed out (overflow).
// - take(n, current_version): exactly ReplayBuffer::take over the queues
//   together, in arrival order (the trainer without a token budget).
// - The token-budget batcher's side: supply(current_version) first drops
//   the stale groups (counted as stale: staleness before anything else),
//   then lists every environment declared or seen, in name order, with its
//   queued groups' tokens newest first, for plan_batch(). take_planned(plan)
//   consumes the groups the plan picked and returns those with a learning
//   signal, in the order picked: a group without one (undersized,
//   zero-variance) is consumed, counted and not returned, as by take(), so
//   it takes its tokens of the budget as it takes its place in a
//   group-count batch (a step stands for the sampling it consumed, and a
//   stream of such groups cannot stall the trainer). The plan must come from
//   supply() with no add or take in between.
// - counters() are the totals, counters(name) one environment's (zeros for
//   one never seen); every counter of ReplayCounters means what it means for
//   ReplayBuffer.
// - step_metrics(batch, current_version, spilled): per environment, every
//   declared or seen one and every one in the batch: what is queued now
//   (rollouts_in_buffer, tokens_in_buffer, frac_on_policy: the share of the
//   queued rollouts sampled with current_version), what arrived since the
//   previous call (new_rollouts, new_tokens, new_generated_tokens,
//   reward_mean, reward_std (population), correct_rate, frac_truncated), the
//   batch's rollouts_used, tokens_used and frac_used (its share of the
//   batch's tokens), and spilled[name]. Rates are 0 over nothing. Starts the
//   next step's new_* counts.
// - One thread (the trainer's); no locking. Nothing fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "algorithms/replay_buffer.h"
#include "algorithms/token_budget_batcher.h"

namespace algorithms {

std::string environment_of(const TrajectoryGroup& group);
std::uint64_t trajectory_tokens(const rollout::Trajectory& trajectory, std::uint64_t max_seq_len);
std::uint64_t group_tokens(const TrajectoryGroup& group, std::uint64_t max_seq_len);

struct EnvironmentMetrics {
  std::uint64_t rollouts_in_buffer = 0;
  std::uint64_t tokens_in_buffer = 0;
  double frac_on_policy = 0.0;
  std::uint64_t new_rollouts = 0;
  std::uint64_t new_tokens = 0;
  std::uint64_t new_generated_tokens = 0;
  double reward_mean = 0.0;
  double reward_std = 0.0;
  double correct_rate = 0.0;
  double frac_truncated = 0.0;
  std::uint64_t rollouts_used = 0;
  std::uint64_t tokens_used = 0;
  double frac_used = 0.0;
  std::uint64_t spilled_tokens = 0;
};

class EnvironmentBuffers {
 public:
  explicit EnvironmentBuffers(ReplayOptions options, std::uint64_t max_seq_len = 0)
      : options_(options), max_seq_len_(max_seq_len) {}

  void set_max_seq_len(std::uint64_t max_seq_len) { max_seq_len_ = max_seq_len; }
  // Listed (with zeros) before its first group arrives.
  void declare(const std::string& environment) { (void)environments_[environment]; }
  void add(TrajectoryGroup group);
  std::vector<TrajectoryGroup> take(std::size_t max_groups, std::uint64_t current_version);

  std::vector<EnvironmentSupply> supply(std::uint64_t current_version);
  std::vector<TrajectoryGroup> take_planned(const BatchPlan& plan);

  std::map<std::string, EnvironmentMetrics> step_metrics(const std::vector<TrajectoryGroup>& batch,
                                                         std::uint64_t current_version,
                                                         const std::map<std::string, std::uint64_t>& spilled);

  std::size_t size() const;
  std::size_t size(const std::string& environment) const;
  std::vector<std::string> environments() const;
  const ReplayCounters& counters() const { return counters_; }
  ReplayCounters counters(const std::string& environment) const;
  const ReplayOptions& options() const { return options_; }
  std::uint64_t max_seq_len() const { return max_seq_len_; }

 private:
  struct Entry {
    TrajectoryGroup group;
    std::uint64_t arrival = 0;
    std::uint64_t tokens = 0;
  };
  // What arrived since the last step_metrics().
  struct Arrivals {
    std::uint64_t rollouts = 0;
    std::uint64_t tokens = 0;
    std::uint64_t generated_tokens = 0;
    std::uint64_t correct = 0;
    std::uint64_t truncated = 0;
    double reward_sum = 0.0;
    double reward_square_sum = 0.0;
  };
  struct Environment {
    std::deque<Entry> queue;  // oldest first
    ReplayCounters counters;
    Arrivals arrivals;
    std::uint64_t last_group_tokens = 0;
  };
  void drop_stale(std::uint64_t current_version);
  // The environment whose front group arrived first (nullptr: all empty).
  Environment* oldest();
  // Counts a consumed group in its environment and the totals, and whether
  // it carries a signal (then counted served).
  GroupSignal consume(Environment& environment, const TrajectoryGroup& group);

  ReplayOptions options_;
  std::uint64_t max_seq_len_;
  std::map<std::string, Environment> environments_;
  ReplayCounters counters_;
  std::uint64_t arrivals_ = 0;
};

}  // namespace algorithms
