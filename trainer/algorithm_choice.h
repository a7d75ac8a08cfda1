// trainer/algorithm_choice.h: what the trainer's --algorithm, --baseline,
// --clip, --behaviour-weight-cap, --keep-zero-variance and --min-group-size
// mean for the update and the replay buffer, in one place (trainer_main.cc
// parses, this decides).
//
// Contract
// - apply_algorithm_choice() sets options.update (objective, baseline,
//   advantage normalisation, decoupling, clip, behaviour-weight cap),
//   options.replay.drop_zero_variance and options.replay.min_group_size:
//   * grpo / decoupled: group-normalised advantages, PPO clip; decoupled adds
//     proximal log-probs and the behaviour-weight cap. Zero-variance groups
//     are dropped (all advantages are 0: no signal) unless keep_zero_variance.
//   * rloo (Marin's, seed 001): leave-one-out advantages, r_i - the mean of
//     the other G - 1 rewards (G/(G-1) times reinforce's group-mean
//     advantage), not normalised, under the PPO clip against the behaviour
//     log-probs (Marin clips the importance ratio of off-policy data too).
//     The drop rule as for grpo. A minimum group size below 2 is an Error:
//     a group of one has no others to average.
//   * reinforce with the group-mean baseline: as grpo for the drop rule.
//   * reinforce with the running (EMA) baseline, seed 000's algorithm: a group
//     whose rewards are all equal still has r - b != 0, so dropping it would
//     bias the gradient (only the groups with mixed outcomes would count):
//     it is never dropped, whatever keep_zero_variance says.
// - The minimum group size (Marin's): groups with fewer trajectories are
//   dropped and counted (replay_buffer.h). min_group_size when given, else
//   2 (a group-relative advantage from one trajectory is 0), except under
//   the running baseline, where a group of one carries r - b and the
//   default is 1 (every group kept).
// - Unknown names are an Error naming the allowed ones. Pure; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "trainer/trainer_loop.h"
#include "zorplex/result.h"

namespace trainer {

struct AlgorithmChoice {
  std::string algorithm = "grpo";  // grpo | rloo | reinforce | decoupled
  std::string baseline = "group";  // reinforce: group | running
  double clip = 0.2;
  double behaviour_weight_cap = 5.0;
  bool keep_zero_variance = false;
  std::optional<std::size_t> min_group_size;  // nullopt: the algorithm's default (above)
};

zorplex::Result<bool> apply_algorithm_choice(const AlgorithmChoice& choice, TrainerOptions& options);

}  // namespace trainer
