// rollout/evaluation.h: greedy evaluation of the policy on held-out Zorplex
// tasks.
//
// Contract
// - evaluate() draws options.count tasks from one TaskGenerator(kind,
//   difficulty, seed) (the first count tasks of that seed, as `zorplex
//   tasks` prints them), plays them with run_rollouts() in batches of
//   batch_size (greedy unless options.rollout.sampling.temperature > 0) and
//   summarizes them (eval_summary.h). progress, when set, is called after
//   every batch with (tasks done, total).
// - Held out: the SFT stream uses task seeds from first_task_seed upward
//   (demonstrations.h); an evaluation seed outside that range shares no
//   value table with training.
// - Errors from rollouts come back as an Error. Thread: as run_rollouts().
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "rollout/eval_summary.h"
#include "rollout/rollout.h"

namespace rollout {

struct EvalOptions {
  zorplex::TaskKind kind = zorplex::TaskKind::kCompositional;
  zorplex::Difficulty difficulty = zorplex::Difficulty::kEasy;
  std::int64_t seed = 42;
  int count = 200;
  int batch_size = 16;
  RolloutOptions rollout = [] {
    RolloutOptions greedy;
    greedy.sampling.temperature = 0.0;
    return greedy;
  }();
};

struct EvalResult {
  std::vector<Trajectory> trajectories;
  EvalSummary summary;
};

using EvalProgress = std::function<void(int done, int total)>;

zorplex::Result<EvalResult> evaluate(const policy::Transformer& model, const EvalOptions& options,
                                     const EvalProgress& progress = nullptr);

}  // namespace rollout
