// zorplex/extraction.h: reading the final answer out of a transcript, with
// each kind's chain of rules (the first rule that finds an integer wins).
//
// Contract
// - text is the full transcript (model text plus injected results); calls
//   are the calls that were run, in order, with their results.
// - The chains (patterns.h has each pattern):
//     compositional: answer tag (-?), answer phrase (-?), trailing "= <int>",
//                    last integer (-?);
//     simple:        answer tag, first tool result that is an integer,
//                    last integer;
//     multi_step:    answer tag, first FETCH result that is an integer,
//                    last integer;
//     recursive:     answer tag, LAST tool result that is an integer,
//                    answer phrase, "value of ... is <int>", last integer.
//   Only compositional reads a minus sign. The last-integer rule can pick up
//   an injected tool result; that is the original's behaviour, kept.
// - No rule hitting gives rule kNone and no answer (never correct).
// - Pure function; safe from any thread.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "zorplex/kinds.h"
#include "zorplex/text_scan.h"
#include "zorplex/tools.h"

namespace zorplex {

enum class ExtractionRule {
  kNone,
  kAnswerTag,
  kAnswerPhrase,
  kTrailingEquals,
  kFirstToolResult,
  kFirstFetchResult,
  kLastToolResult,
  kValueOfPhrase,
  kLastInteger,
};
const char* extraction_rule_name(ExtractionRule rule);

struct Extraction {
  ExtractionRule rule = ExtractionRule::kNone;
  std::optional<TextInteger> answer;  // set exactly when rule != kNone
};

Extraction extract_answer(TaskKind kind, std::string_view text, const std::vector<ExecutedCall>& calls);

}  // namespace zorplex
