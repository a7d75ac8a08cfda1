// algorithms/outcome_tally.h: how the trajectories that arrived did, counted
// before any filter. The replay buffer drops zero-variance groups (all right
// or all wrong); an accuracy taken after that drop is pulled towards 0.5, so
// the trainer reports this one beside the accuracy of what it trained on.
//
// Contract: add() counts every trajectory of a group (correct, reward);
// rates are 0 with nothing counted; reset() starts over (once per step).
// One thread; nothing fails.
#pragma once

#include <cstdint>

#include "algorithms/replay_buffer.h"

namespace algorithms {

class OutcomeTally {
 public:
  void add(const TrajectoryGroup& group);
  void reset() { *this = OutcomeTally(); }
  std::uint64_t trajectories() const { return trajectories_; }
  double correct_rate() const;
  double reward_mean() const;

 private:
  std::uint64_t trajectories_ = 0;
  std::uint64_t correct_ = 0;
  double reward_sum_ = 0.0;
};

}  // namespace algorithms
