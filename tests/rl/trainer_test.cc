// The trainer's algorithm choice (trainer/algorithm_choice.h): what each
// --algorithm and --baseline turns on, the zero-variance rule (dropped under
// group-relative advantages: no signal; never under REINFORCE's running
// baseline, where dropping them would bias the gradient) and the minimum
// group size (2 unless given; 1 under the running baseline; RLOO needs 2).
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
  for (const char* algorithm : {"grpo", "rloo", "decoupled", "reinforce"}) {
    INFO(algorithm);
    TrainerOptions options;
    AlgorithmChoice choice;
    choice.algorithm = algorithm;
    choice.baseline = "group";
    REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
    const training::BaselineKind expected = std::string(algorithm) == "rloo"
                                                ? training::BaselineKind::kLeaveOneOut
                                                : training::BaselineKind::kGroupMean;
    CHECK(options.update.baseline == expected);
    CHECK(options.replay.drop_zero_variance);
    CHECK(options.replay.min_group_size == 2);
    CHECK(options.update.loss.decoupled == (std::string(algorithm) == "decoupled"));
    choice.keep_zero_variance = true;
    REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
    CHECK_FALSE(options.replay.drop_zero_variance);
  }
  TrainerOptions options;
  const AlgorithmChoice unknown_algorithm{"sgd", "group", 0.2, 5.0, false, std::nullopt};
  const AlgorithmChoice unknown_baseline{"grpo", "ema", 0.2, 5.0, false, std::nullopt};
  CHECK_FALSE(trainer::apply_algorithm_choice(unknown_algorithm, options).ok());
  CHECK_FALSE(trainer::apply_algorithm_choice(unknown_baseline, options).ok());
}

TEST_CASE("trainer algorithm choice: rloo is leave-one-out advantages, unnormalised, under the PPO clip",
          "[rl][trainer]") {
  TrainerOptions options;
  AlgorithmChoice choice;
  choice.algorithm = "rloo";
  choice.clip = 0.3;
  REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
  CHECK(options.algorithm == "rloo");
  CHECK(options.update.baseline == training::BaselineKind::kLeaveOneOut);
  CHECK_FALSE(options.update.normalize_advantages);
  CHECK(options.update.loss.objective == training::Objective::kPpoClip);
  CHECK(options.update.loss.clip_epsilon == 0.3);
  CHECK_FALSE(options.update.loss.decoupled);
  choice.min_group_size = 4;
  REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
  CHECK(options.replay.min_group_size == 4);
  // A group of one has no leave-one-out baseline: refused, saying what to change.
  choice.min_group_size = 1;
  auto refused = trainer::apply_algorithm_choice(choice, options);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("--min-group-size 2 or more") != std::string::npos);
}

TEST_CASE("trainer algorithm choice: the minimum group size is 2 unless given, 1 under the running baseline",
          "[rl][trainer]") {
  TrainerOptions options;
  AlgorithmChoice grpo;
  REQUIRE(trainer::apply_algorithm_choice(grpo, options).ok());
  CHECK(options.replay.min_group_size == 2);
  grpo.min_group_size = 1;  // given: every group kept
  REQUIRE(trainer::apply_algorithm_choice(grpo, options).ok());
  CHECK(options.replay.min_group_size == 1);
  // A group of one carries r - b under the running baseline: kept by default.
  AlgorithmChoice running;
  running.algorithm = "reinforce";
  running.baseline = "running";
  REQUIRE(trainer::apply_algorithm_choice(running, options).ok());
  CHECK(options.replay.min_group_size == 1);
  running.min_group_size = 3;
  REQUIRE(trainer::apply_algorithm_choice(running, options).ok());
  CHECK(options.replay.min_group_size == 3);
}
