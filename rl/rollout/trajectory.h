// rollout/trajectory.h: one Zorplex episode as the token sequence the model
// saw, with what a trainer needs to learn from it; and the builder that keeps
// the tokens, the loss mask and the environment in step, turn by turn.
//
// Contract
// - Trajectory::tokens is exactly the sequence the policy was conditioned
//   on and produced: the prompt (encode_prompt), then for each turn the
//   tokens the model generated (EOS included when it was sampled), then the
//   injected tool result (encode(injection)) when the turn ran tools.
//   decode(tokens[prompt_tokens..]) == transcript.
// - generated[i] is 1 exactly for the tokens the model produced (the loss
//   mask); the prompt and every injected result are 0. log_probs[i] is the
//   behaviour log-prob of token i when generated[i] is 1 (sampling.h's
//   definition, at the sampling temperature), 0 otherwise. The three vectors
//   have the same length.
// - Outcome fields (score, turns, end) are filled by TrajectoryBuilder::finish().
//
// TrajectoryBuilder
// - Borrows the Toolbox (must outlive the builder); copies the task.
// - context() is what the next turn must be conditioned on. add_turn(tokens,
//   log_probs) appends one turn (sizes must match; tokens may be empty), runs
//   its tool calls through zorplex::Episode, appends the injection, and says
//   whether the episode is over. truncate() ends an episode that has no room
//   left in the context (EpisodeEnd kNotOver stays the recorded end, and
//   truncated is set). Calls after the end change nothing.
// - finish() scores the transcript with the episode's executed calls
//   (zorplex::score_episode) and returns the trajectory.
// - One thread at a time; nothing here fails except add_turn() with
//   mismatched sizes, which throws std::invalid_argument (a programming
//   error, not input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/tokenizer.h"
#include "zorplex/episode.h"
#include "zorplex/scoring.h"
#include "zorplex/tasks.h"

namespace rollout {

using policy::TokenId;

struct Trajectory {
  zorplex::Task task;
  std::vector<TokenId> tokens;
  std::vector<std::uint8_t> generated;  // loss mask: 1 = produced by the model
  std::vector<float> log_probs;         // behaviour log-probs; 0 where generated is 0
  // The policy version each token was sampled with (several when weights were
  // installed mid-generation); 0 where generated is 0.
  std::vector<std::uint64_t> token_versions;
  std::size_t prompt_tokens = 0;
  std::string transcript;  // the assistant text: model text plus injected results
  zorplex::Score score;    // correct, failure mode, reward, tool calls, extraction
  int turns = 0;
  zorplex::EpisodeEnd end = zorplex::EpisodeEnd::kNotOver;
  bool truncated = false;  // ended because the context was full

  std::size_t generated_tokens() const;
  // The oldest and newest version of its generated tokens (0 with none).
  std::uint64_t oldest_version() const;
  std::uint64_t newest_version() const;
};

class TrajectoryBuilder {
 public:
  TrajectoryBuilder(const zorplex::Task& task, const zorplex::Toolbox& tools,
                    const policy::PromptFormat& format, int max_turns = zorplex::kMaxTurns);

  const std::vector<TokenId>& context() const { return trajectory_.tokens; }
  bool over() const { return episode_.over() || trajectory_.truncated; }
  int turns() const { return episode_.turns(); }

  // Appends one turn; returns whether the episode is over afterwards.
  // versions: one per token (the model version that sampled it); empty: 0s.
  bool add_turn(const std::vector<TokenId>& tokens, const std::vector<float>& log_probs,
                const std::vector<std::uint64_t>& versions = {});
  void truncate();

  Trajectory finish(zorplex::Shaping shaping);

 private:
  const zorplex::Toolbox* tools_;
  zorplex::Episode episode_;
  Trajectory trajectory_;
};

}  // namespace rollout
