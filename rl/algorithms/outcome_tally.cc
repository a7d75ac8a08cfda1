// algorithms/outcome_tally.cc: see outcome_tally.h.
#include "algorithms/outcome_tally.h"

namespace algorithms {

void OutcomeTally::add(const TrajectoryGroup& group) {
  for (const rollout::Trajectory& t : group.trajectories) {
    ++trajectories_;
    correct_ += t.score.correct ? 1 : 0;
    reward_sum_ += t.score.reward;
  }
}

double OutcomeTally::correct_rate() const {
  return trajectories_ == 0 ? 0.0 : static_cast<double>(correct_) / static_cast<double>(trajectories_);
}

double OutcomeTally::reward_mean() const {
  return trajectories_ == 0 ? 0.0 : reward_sum_ / static_cast<double>(trajectories_);
}

}  // namespace algorithms
