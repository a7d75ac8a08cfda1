// algorithms/advantages.h: sequence-level advantages for policy-gradient RL
// on episodes that end with one reward.
//
// Contract
// - group_advantages(rewards, normalize): GRPO's group-relative advantage:
//   A_i = r_i - mean(r); with normalize, divided by (std(r) + eps), std the
//   population standard deviation of the group (1/G, as GRPO). A group of one,
//   or one whose rewards are all equal, gives all zeros (no signal; the replay
//   buffer drops such groups before they get here, see replay_buffer.h).
// - leave_one_out_advantages(rewards): RLOO's advantage (Kool et al. 2019;
//   Ahmadian et al. 2024; Marin's): each trajectory's baseline is the mean
//   reward of the other G - 1 of its group, A_i = r_i - mean_{j != i} r_j,
//   which is G/(G-1) * (r_i - mean(r)): group_advantages(rewards, false)
//   scaled by G/(G-1). Never normalised by the std. Rewards all equal: all
//   exactly 0 (no signal). A group of fewer than 2 is an Error (the others'
//   mean is undefined): the trainer's minimum group size keeps such groups
//   out before they get here (replay_buffer.h, --min-group-size).
// - RunningMeanBaseline: REINFORCE's baseline b, an exponential moving average
//   of batch mean rewards: advantage(r) = r - b; update(batch) then sets
//   b = decay * b + (1 - decay) * mean(batch), or b = mean(batch) for the
//   first batch. Before any update b = 0.
// - Plain values and pure functions; a RunningMeanBaseline is one thread's.
#pragma once

#include <vector>

#include "zorplex/result.h"

namespace algorithms {

std::vector<double> group_advantages(const std::vector<double>& rewards, bool normalize, double eps = 1e-6);

zorplex::Result<std::vector<double>> leave_one_out_advantages(const std::vector<double>& rewards);

// True when every reward equals the first (within 1e-12): no learning signal.
bool zero_variance(const std::vector<double>& rewards);

class RunningMeanBaseline {
 public:
  explicit RunningMeanBaseline(double decay = 0.9) : decay_(decay) {}

  double value() const { return value_; }
  double advantage(double reward) const { return reward - value_; }
  void update(const std::vector<double>& batch_rewards);
  // For checkpoints.
  void restore(double value, bool initialized) {
    value_ = value;
    initialized_ = initialized;
  }
  bool initialized() const { return initialized_; }

 private:
  double decay_;
  double value_ = 0.0;
  bool initialized_ = false;
};

}  // namespace algorithms
