#include "zorplex/episode.h"

namespace zorplex {

const char* episode_end_name(EpisodeEnd end) {
  switch (end) {
    case EpisodeEnd::kNotOver: return "not_over";
    case EpisodeEnd::kAnswered: return "answered";
    case EpisodeEnd::kNoToolCall: return "no_tool_call";
    case EpisodeEnd::kTurnLimit: return "turn_limit";
  }
  return "?";
}

Episode::Episode(const Toolbox& tools, int max_turns) : tools_(&tools), max_turns_(max_turns) {}

Episode::TurnOutcome Episode::add_turn(std::string_view turn_text) {
  TurnOutcome outcome;
  if (over()) {
    outcome.end = end_;
    return outcome;
  }
  ++turns_;
  transcript_ += turn_text;
  const std::vector<ToolCall> parsed = parse_tool_calls(turn_text);
  const bool answered = contains_answer(turn_text);
  if (answered || parsed.empty()) {
    end_ = answered ? EpisodeEnd::kAnswered : EpisodeEnd::kNoToolCall;
    outcome.end = end_;
    return outcome;
  }
  std::vector<ToolResult> results;
  for (const ToolCall& call : parsed) {
    ExecutedCall executed{call, tools_->execute(call)};
    results.push_back(executed.result);
    outcome.calls.push_back(executed);
    calls_.push_back(std::move(executed));
  }
  outcome.injection = result_injection(results);
  injected_.push_back(Span{transcript_.size(), outcome.injection.size()});
  transcript_ += outcome.injection;
  if (turns_ >= max_turns_) end_ = EpisodeEnd::kTurnLimit;
  outcome.end = end_;
  return outcome;
}

}  // namespace zorplex
