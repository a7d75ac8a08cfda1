// The trainer's algorithm choice (trainer/algorithm_choice.h): what each
// --algorithm and --baseline turns on, and the zero-variance rule: dropped
// under group-relative advantages (no signal), never under REINFORCE's
// running baseline (where dropping them would bias the gradient).
#include <catch2/catch.hpp>

#include "trainer/algorithm_choice.h"

using trainer::AlgorithmChoice;
using trainer::TrainerOptions;

TEST_CASE("trainer algorithm choice: REINFORCE with the running baseline keeps zero-variance groups",
          "[rl][trainer]") {
  TrainerOptions options;
  AlgorithmChoice choice;
  choice.algorithm = "reinforce";
  choice.baseline = "running";
  REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
  CHECK(options.update.baseline == training::BaselineKind::kRunningMean);
  CHECK(options.update.loss.objective == training::Objective::kReinforce);
  CHECK_FALSE(options.update.normalize_advantages);
  CHECK_FALSE(options.replay.drop_zero_variance);
}

TEST_CASE("trainer algorithm choice: group-relative algorithms drop zero-variance groups unless told not to",
          "[rl][trainer]") {
  for (const char* algorithm : {"grpo", "decoupled", "reinforce"}) {
    INFO(algorithm);
    TrainerOptions options;
    AlgorithmChoice choice;
    choice.algorithm = algorithm;
    choice.baseline = "group";
    REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
    CHECK(options.update.baseline == training::BaselineKind::kGroupMean);
    CHECK(options.replay.drop_zero_variance);
    CHECK(options.update.loss.decoupled == (std::string(algorithm) == "decoupled"));
    choice.keep_zero_variance = true;
    REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
    CHECK_FALSE(options.replay.drop_zero_variance);
  }
  TrainerOptions options;
  CHECK_FALSE(trainer::apply_algorithm_choice(AlgorithmChoice{"sgd", "group", 0.2, 5.0, false}, options).ok());
  CHECK_FALSE(trainer::apply_algorithm_choice(AlgorithmChoice{"grpo", "ema", 0.2, 5.0, false}, options).ok());
}
