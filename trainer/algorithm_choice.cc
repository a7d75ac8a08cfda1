// trainer/algorithm_choice.cc: see algorithm_choice.h.
#include "trainer/algorithm_choice.h"

namespace trainer {

zorplex::Result<bool> apply_algorithm_choice(const AlgorithmChoice& choice, TrainerOptions& options) {
  if (choice.algorithm != "grpo" && choice.algorithm != "reinforce" && choice.algorithm != "decoupled")
    return zorplex::Error{"--algorithm " + choice.algorithm + ": expected grpo, reinforce or decoupled"};
  if (choice.baseline != "group" && choice.baseline != "running")
    return zorplex::Error{"--baseline " + choice.baseline + ": expected group or running"};
  options.algorithm = choice.algorithm;
  training::RlUpdateOptions& update = options.update;
  update.loss.clip_epsilon = choice.clip;
  options.replay.drop_zero_variance = !choice.keep_zero_variance;
  if (choice.algorithm == "reinforce") {
    update.loss.objective = training::Objective::kReinforce;
    update.loss.decoupled = false;
    update.loss.behaviour_weight_cap = 0.0;
    update.normalize_advantages = false;
    if (choice.baseline == "running") {
      update.baseline = training::BaselineKind::kRunningMean;
      options.replay.drop_zero_variance = false;  // r - b carries signal in every group
    } else {
      update.baseline = training::BaselineKind::kGroupMean;
    }
    return true;
  }
  update.loss.objective = training::Objective::kPpoClip;
  update.baseline = training::BaselineKind::kGroupMean;
  update.normalize_advantages = true;
  update.loss.decoupled = choice.algorithm == "decoupled";
  update.loss.behaviour_weight_cap = update.loss.decoupled ? choice.behaviour_weight_cap : 0.0;
  return true;
}

}  // namespace trainer
