// rollout/eval_summary.h: what an evaluation reports, computed from its
// trajectories: accuracy, format rate, turns, tool calls, failure modes,
// generation speed; as a table for people and JSON for tools.
//
// Contract
// - summarize() counts over all trajectories (an empty list gives zeros,
//   never NaN). accuracy = correct / tasks. format_rate = share of episodes
//   whose answer came from an "[ANSWER] <int>" tag (extraction rule
//   answer_tag); tag_rate = share with the tag anywhere (the complement of
//   wrong_format among the wrong ones, and what the +0.2 pays for).
//   tokens_per_second = generated tokens / generation seconds (0 if none).
// - to_json() has the fields below by name plus "failure_modes" (an object
//   of all four modes, zeros included) and "settings" as given; table() is
//   a fixed-width text block.
// - Plain values and pure functions; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rollout/trajectory.h"

namespace rollout {

struct EvalSummary {
  int tasks = 0;
  int correct = 0;
  double accuracy = 0.0;
  double format_rate = 0.0;
  double tag_rate = 0.0;
  double avg_turns = 0.0;
  double avg_tool_calls = 0.0;
  double avg_reward = 0.0;
  int truncated = 0;
  std::map<std::string, int> failure_modes;  // success, wrong_format, tool_spam, wrong_answer
  std::uint64_t generated_tokens = 0;
  double generation_seconds = 0.0;
  double tokens_per_second = 0.0;
  double wall_seconds = 0.0;
  std::map<std::string, std::string> settings;  // what was evaluated, for the record
};

EvalSummary summarize(const std::vector<Trajectory>& trajectories, std::uint64_t generated_tokens,
                      double generation_seconds);

std::string to_json(const EvalSummary& summary, int indent = 2);
std::string table(const EvalSummary& summary);

}  // namespace rollout
