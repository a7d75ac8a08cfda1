// trainer/algorithm_choice.cc: see algorithm_choice.h.
#include "trainer/algorithm_choice.h"

namespace trainer {

zorplex::Result<bool> apply_algorithm_choice(const AlgorithmChoice& choice, TrainerOptions& options) {
  if (choice.algorithm != "grpo" && choice.algorithm != "rloo" && choice.algorithm != "reinforce" &&
      choice.algorithm != "decoupled")
    return zorplex::Error{"--algorithm " + choice.algorithm +
                          ": expected grpo, rloo, reinforce or decoupled"};
  if (choice.baseline != "group" && choice.baseline != "running")
    return zorplex::Error{"--baseline " + choice.baseline + ": expected group or running"};
  const bool running_baseline = choice.algorithm == "reinforce" && choice.baseline == "running";
  const std::size_t min_group_size = choice.min_group_size.value_or(running_baseline ? 1 : 2);
  if (choice.algorithm == "rloo" && min_group_size < 2)
    return zorplex::Error{"--algorithm rloo needs --min-group-size 2 or more (got " +
                          std::to_string(min_group_size) +
                          "): a trajectory's leave-one-out baseline is the mean of the others in its "
                          "group, and a group of one has none"};
  options.algorithm = choice.algorithm;
  options.replay.min_group_size = min_group_size;
  training::RlUpdateOptions& update = options.update;
  update.loss.clip_epsilon = choice.clip;
  options.replay.drop_zero_variance = !choice.keep_zero_variance;
  if (choice.algorithm == "reinforce") {
    update.loss.objective = training::Objective::kReinforce;
    update.loss.decoupled = false;
    update.loss.behaviour_weight_cap = 0.0;
    update.normalize_advantages = false;
    if (running_baseline) {
      update.baseline = training::BaselineKind::kRunningMean;
      options.replay.drop_zero_variance = false;  // r - b carries signal in every group
    } else {
      update.baseline = training::BaselineKind::kGroupMean;
    }
    return true;
  }
  update.loss.objective = training::Objective::kPpoClip;
  if (choice.algorithm == "rloo") {
    update.baseline = training::BaselineKind::kLeaveOneOut;
    update.normalize_advantages = false;
  } else {
    update.baseline = training::BaselineKind::kGroupMean;
    update.normalize_advantages = true;
  }
  update.loss.decoupled = choice.algorithm == "decoupled";
  update.loss.behaviour_weight_cap = update.loss.decoupled ? choice.behaviour_weight_cap : 0.0;
  return true;
}

}  // namespace trainer
