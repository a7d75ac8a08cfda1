// rollout/eval_summary.cc: see eval_summary.h.
#include "rollout/eval_summary.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace rollout {
namespace {

constexpr zorplex::FailureMode kModes[] = {zorplex::FailureMode::kSuccess, zorplex::FailureMode::kWrongFormat,
                                           zorplex::FailureMode::kToolSpam,
                                           zorplex::FailureMode::kWrongAnswer};

std::string line(const char* label, const std::string& value) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "  %-22s %s\n", label, value.c_str());
  return buffer;
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string percent(double share) {
  return fixed(100.0 * share, 1) + " %";
}

}  // namespace

EvalSummary summarize(const std::vector<Trajectory>& trajectories, std::uint64_t generated_tokens,
                      double generation_seconds) {
  EvalSummary s;
  for (zorplex::FailureMode mode : kModes) s.failure_modes[zorplex::failure_mode_name(mode)] = 0;
  s.tasks = static_cast<int>(trajectories.size());
  int formatted = 0;
  int tagged = 0;
  double turns = 0.0;
  double calls = 0.0;
  double reward = 0.0;
  for (const Trajectory& t : trajectories) {
    s.correct += t.score.correct ? 1 : 0;
    formatted += t.score.extraction.rule == zorplex::ExtractionRule::kAnswerTag ? 1 : 0;
    tagged += t.score.has_answer_tag ? 1 : 0;
    turns += t.turns;
    calls += t.score.tool_calls;
    reward += t.score.reward;
    s.truncated += t.truncated ? 1 : 0;
    ++s.failure_modes[zorplex::failure_mode_name(t.score.failure_mode)];
  }
  if (s.tasks > 0) {
    s.accuracy = static_cast<double>(s.correct) / s.tasks;
    s.format_rate = static_cast<double>(formatted) / s.tasks;
    s.tag_rate = static_cast<double>(tagged) / s.tasks;
    s.avg_turns = turns / s.tasks;
    s.avg_tool_calls = calls / s.tasks;
    s.avg_reward = reward / s.tasks;
  }
  s.generated_tokens = generated_tokens;
  s.generation_seconds = generation_seconds;
  s.tokens_per_second =
      generation_seconds > 0.0 ? static_cast<double>(generated_tokens) / generation_seconds : 0.0;
  return s;
}

std::string to_json(const EvalSummary& s, int indent) {
  nlohmann::ordered_json j{{"tasks", s.tasks},
                           {"correct", s.correct},
                           {"accuracy", s.accuracy},
                           {"format_rate", s.format_rate},
                           {"tag_rate", s.tag_rate},
                           {"avg_turns", s.avg_turns},
                           {"avg_tool_calls", s.avg_tool_calls},
                           {"avg_reward", s.avg_reward},
                           {"truncated", s.truncated},
                           {"failure_modes", s.failure_modes},
                           {"generated_tokens", s.generated_tokens},
                           {"generation_seconds", s.generation_seconds},
                           {"tokens_per_second", s.tokens_per_second},
                           {"wall_seconds", s.wall_seconds},
                           {"settings", s.settings}};
  return j.dump(indent);
}

std::string table(const EvalSummary& s) {
  std::string out;
  out += line("tasks", std::to_string(s.tasks));
  out += line("accuracy", percent(s.accuracy) + "  (" + std::to_string(s.correct) + " correct)");
  out += line("format rate", percent(s.format_rate) + "  (answer from an [ANSWER] tag)");
  out += line("answer tag present", percent(s.tag_rate));
  out += line("avg turns", fixed(s.avg_turns, 2));
  out += line("avg tool calls", fixed(s.avg_tool_calls, 2));
  out += line("avg reward", fixed(s.avg_reward, 3));
  out += line("truncated (context)", std::to_string(s.truncated));
  for (zorplex::FailureMode mode : kModes) {
    const char* name = zorplex::failure_mode_name(mode);
    const int count = s.failure_modes.count(name) ? s.failure_modes.at(name) : 0;
    out += line(
        (std::string("  ") + name).c_str(),
        std::to_string(count) + "  (" + percent(s.tasks ? static_cast<double>(count) / s.tasks : 0.0) + ")");
  }
  out += line("generated tokens", std::to_string(s.generated_tokens));
  out += line("generation tokens/s", fixed(s.tokens_per_second, 0));
  out += line("wall time", fixed(s.wall_seconds, 1) + " s");
  return out;
}

}  // namespace rollout
