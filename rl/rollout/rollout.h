// rollout/rollout.h: multi-turn Zorplex episodes with tools, generated in
// batches by the policy.
//
// Contract
// - run_rollouts() plays one episode per request, all in lockstep: each turn,
//   every unfinished episode's context (TrajectoryBuilder::context()) is one
//   row of a single policy::generate() call, with the per-turn token budget
//   as max_new_tokens and the Zorplex stop rule (zorplex::check_turn_stop)
//   as the stop callback; the turn's tokens and log-probs go back into the
//   episode, which runs the tools and injects their results. An episode ends
//   as zorplex::Episode says (answer, no tool call, max_turns) or, when its
//   context has no room for another token (max_seq_len), as truncated.
// - Turn t samples with seed options.sampling.seed mixed with t, so turns
//   do not replay one random stream; the same model, requests and options
//   give the same trajectories.
// - Requests borrow their Toolbox; it must outlive the call.
// - Errors: bad sampling options or a torch failure come back as an Error;
//   no partial result is returned.
// - Thread: reads the model's parameters for the whole call (no writes to
//   its buffer may overlap; with a step hook, the hook's models'); uses
//   torch's intra-op threads.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/sampling.h"
#include "policy/tokenizer.h"
#include "policy/transformer.h"
#include "rollout/trajectory.h"
#include "zorplex/protocol.h"
#include "zorplex/result.h"
#include "zorplex/scoring.h"
#include "zorplex/tasks.h"

namespace rollout {

struct RolloutRequest {
  zorplex::Task task;
  const zorplex::Toolbox* tools = nullptr;
};

struct RolloutOptions {
  // max_new_tokens is the per-turn budget; temperature 0 is greedy.
  policy::SamplingOptions sampling{zorplex::kTurnTokenBudget, 1.0, 1.0, 0};
  int max_turns = zorplex::kMaxTurns;
  zorplex::Shaping shaping = zorplex::Shaping::kOriginal;
  policy::PromptFormat format;
  // In-flight weight updates (policy::StepHook): asked for the model before
  // every prefill and decode step; each token records the version it was
  // sampled with (Trajectory::token_versions). Empty: `model`, version 0.
  policy::StepHook step_hook;
};

struct RolloutStats {
  std::uint64_t generated_tokens = 0;  // sampled tokens, all episodes and turns
  double generation_seconds = 0.0;     // wall time inside policy::generate()
  int generate_calls = 0;              // one per turn
};

zorplex::Result<std::vector<Trajectory>> run_rollouts(const policy::Transformer& model,
                                                      const std::vector<RolloutRequest>& requests,
                                                      const RolloutOptions& options,
                                                      RolloutStats* stats = nullptr);

}  // namespace rollout
