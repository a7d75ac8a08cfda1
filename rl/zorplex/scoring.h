// zorplex/scoring.h: correctness, failure mode and reward of a finished
// episode.
//
// Contract
// - correct: the extracted integer (extraction.h) equals the task's answer.
//   No extracted answer, or a task without an answer, is never correct.
// - has_answer_tag: "[ANSWER]" (case-sensitive) appears anywhere in the
//   transcript, with or without a number after it.
// - Failure modes, first that applies: success (correct), wrong_format (no
//   tag), tool_spam (more than 3 tool calls), wrong_answer.
// - Rewards, selected by Shaping:
//     kOriginal:        +1.0 if correct, +0.2 if the tag appears,
//                       -0.1 per tool call beyond 2;
//     kTagNeedsCorrect: the same, but the +0.2 is paid only together with a
//                       correct answer (answering at once with a tagged guess
//                       no longer earns anything).
//   Computed in tenths and divided once, so 1.2 prints as 1.2.
// - Pure functions; safe from any thread. parse_shaping() returns an Error
//   naming the valid values for an unknown name.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "zorplex/extraction.h"
#include "zorplex/kinds.h"
#include "zorplex/result.h"
#include "zorplex/tools.h"

namespace zorplex {

enum class Shaping { kOriginal, kTagNeedsCorrect };
const char* shaping_name(Shaping shaping);  // "original", "tag_needs_correct"
Result<Shaping> parse_shaping(std::string_view name);

enum class FailureMode { kSuccess, kWrongFormat, kToolSpam, kWrongAnswer };
const char* failure_mode_name(FailureMode mode);  // "success", "wrong_format", ...

// Tool calls the reward pays for before the penalty starts, and the count
// above which a wrong answer is "tool_spam".
constexpr int kFreeToolCalls = 2;
constexpr int kToolSpamAbove = 3;

bool has_answer_tag(std::string_view transcript);
FailureMode classify_failure(bool correct, bool has_tag, int tool_calls);
double shaped_reward(Shaping shaping, bool correct, bool has_tag, int tool_calls);

struct Score {
  Extraction extraction;
  bool correct = false;
  bool has_answer_tag = false;
  int tool_calls = 0;
  FailureMode failure_mode = FailureMode::kWrongFormat;
  double reward = 0.0;
};

// Scores a transcript whose executed calls are known (Episode::calls()).
Score score_episode(TaskKind kind, std::optional<std::int64_t> answer, std::string_view transcript,
                    const std::vector<ExecutedCall>& calls, Shaping shaping);

// Scores a bare transcript: every parsable tool call in it counts as run and
// is run again with tools (what the original's TaskSpec.evaluate() does). For
// transcripts made under the protocol this equals score_episode(), because a
// turn stops at its first complete tool call; the one difference is a call
// in a turn that also holds an answer, which the episode neither ran nor
// counted.
Score score_transcript(const Toolbox& tools, std::optional<std::int64_t> answer, std::string_view transcript,
                       Shaping shaping);

}  // namespace zorplex
