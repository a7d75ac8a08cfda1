#include "zorplex/scoring.h"

#include <algorithm>

#include "zorplex/protocol.h"

namespace zorplex {

const char* shaping_name(Shaping shaping) {
  switch (shaping) {
    case Shaping::kOriginal: return "original";
    case Shaping::kTagNeedsCorrect: return "tag_needs_correct";
  }
  return "?";
}

Result<Shaping> parse_shaping(std::string_view name) {
  for (Shaping shaping : {Shaping::kOriginal, Shaping::kTagNeedsCorrect}) {
    if (name == shaping_name(shaping)) return shaping;
  }
  return Error{"unknown reward shaping '" + std::string(name) +
               "': expected one of original, tag_needs_correct"};
}

const char* failure_mode_name(FailureMode mode) {
  switch (mode) {
    case FailureMode::kSuccess: return "success";
    case FailureMode::kWrongFormat: return "wrong_format";
    case FailureMode::kToolSpam: return "tool_spam";
    case FailureMode::kWrongAnswer: return "wrong_answer";
  }
  return "?";
}

bool has_answer_tag(std::string_view transcript) {
  return transcript.find("[ANSWER]") != std::string_view::npos;
}

FailureMode classify_failure(bool correct, bool has_tag, int tool_calls) {
  if (correct) return FailureMode::kSuccess;
  if (!has_tag) return FailureMode::kWrongFormat;
  if (tool_calls > kToolSpamAbove) return FailureMode::kToolSpam;
  return FailureMode::kWrongAnswer;
}

double shaped_reward(Shaping shaping, bool correct, bool has_tag, int tool_calls) {
  // In tenths: +10 correct, +2 tag, -1 per call beyond kFreeToolCalls.
  long long tenths = correct ? 10 : 0;
  const bool pay_tag = shaping == Shaping::kOriginal ? has_tag : (has_tag && correct);
  if (pay_tag) tenths += 2;
  tenths -= std::max(0, tool_calls - kFreeToolCalls);
  return static_cast<double>(tenths) / 10.0;
}

Score score_episode(TaskKind kind, std::optional<std::int64_t> answer, std::string_view transcript,
                    const std::vector<ExecutedCall>& calls, Shaping shaping) {
  Score score;
  score.extraction = extract_answer(kind, transcript, calls);
  score.correct = answer.has_value() && score.extraction.answer.has_value() &&
                  score.extraction.answer->value.has_value() && *score.extraction.answer->value == *answer;
  score.has_answer_tag = has_answer_tag(transcript);
  score.tool_calls = static_cast<int>(calls.size());
  score.failure_mode = classify_failure(score.correct, score.has_answer_tag, score.tool_calls);
  score.reward = shaped_reward(shaping, score.correct, score.has_answer_tag, score.tool_calls);
  return score;
}

Score score_transcript(const Toolbox& tools, std::optional<std::int64_t> answer, std::string_view transcript,
                       Shaping shaping) {
  std::vector<ExecutedCall> calls;
  for (ToolCall& call : parse_tool_calls(transcript)) {
    ToolResult result = tools.execute(call);
    calls.push_back(ExecutedCall{std::move(call), std::move(result)});
  }
  return score_episode(tools.kind(), answer, transcript, calls, shaping);
}

}  // namespace zorplex
