// trainer/algorithm_choice.h: what the trainer's --algorithm, --baseline,
// --clip, --behaviour-weight-cap and --keep-zero-variance mean for the update
// and the replay buffer, in one place (trainer_main.cc parses, this decides).
//
// Contract
// - apply_algorithm_choice() sets options.update (objective, baseline,
//   advantage normalisation, decoupling, clip, behaviour-weight cap) and
//   options.replay.drop_zero_variance:
//   * grpo / decoupled: group-normalised advantages, PPO clip; decoupled adds
//     proximal log-probs and the behaviour-weight cap. Zero-variance groups
//     are dropped (all advantages are 0: no signal) unless keep_zero_variance.
//   * reinforce with the group-mean baseline: as above for the drop rule.
//   * reinforce with the running (EMA) baseline, seed 000's algorithm: a group
//     whose rewards are all equal still has r - b != 0, so dropping it would
//     bias the gradient (only the groups with mixed outcomes would count):
//     it is never dropped, whatever keep_zero_variance says.
// - Unknown names are an Error naming the allowed ones. Pure; any thread.
#pragma once

#include <string>

#include "trainer/trainer_loop.h"
#include "zorplex/result.h"

namespace trainer {

struct AlgorithmChoice {
  std::string algorithm = "grpo";  // grpo | reinforce | decoupled
  std::string baseline = "group";  // reinforce: group | running
  double clip = 0.2;
  double behaviour_weight_cap = 5.0;
  bool keep_zero_variance = false;
};

zorplex::Result<bool> apply_algorithm_choice(const AlgorithmChoice& choice, TrainerOptions& options);

}  // namespace trainer
