#include "zorplex/extraction.h"

#include <utility>

#include "zorplex/patterns.h"

namespace zorplex {
namespace {

Extraction hit(ExtractionRule rule, std::optional<TextInteger> answer) {
  Extraction out;
  if (answer) {
    out.rule = rule;
    out.answer = std::move(answer);
  }
  return out;
}

// The first (or last) integer result, optionally of one tool only.
std::optional<TextInteger> tool_result(const std::vector<ExecutedCall>& calls, bool last, const char* only) {
  std::optional<TextInteger> found;
  for (const ExecutedCall& executed : calls) {
    if (only != nullptr && ascii_upper(executed.call.name) != only) continue;
    if (!executed.result.is_integer()) continue;
    found = make_text_integer(*executed.result.number);
    if (!last) break;
  }
  return found;
}

Extraction compositional(std::string_view text) {
  if (auto v = last_answer_tag(text, true)) return hit(ExtractionRule::kAnswerTag, v);
  if (auto v = last_answer_phrase(text, true)) return hit(ExtractionRule::kAnswerPhrase, v);
  if (auto v = trailing_equals(text)) return hit(ExtractionRule::kTrailingEquals, v);
  return hit(ExtractionRule::kLastInteger, last_integer(text, true));
}

Extraction simple(std::string_view text, const std::vector<ExecutedCall>& calls) {
  if (auto v = last_answer_tag(text, false)) return hit(ExtractionRule::kAnswerTag, v);
  if (auto v = tool_result(calls, false, nullptr)) return hit(ExtractionRule::kFirstToolResult, v);
  return hit(ExtractionRule::kLastInteger, last_integer(text, false));
}

Extraction multi_step(std::string_view text, const std::vector<ExecutedCall>& calls) {
  if (auto v = last_answer_tag(text, false)) return hit(ExtractionRule::kAnswerTag, v);
  if (auto v = tool_result(calls, false, kFetch)) return hit(ExtractionRule::kFirstFetchResult, v);
  return hit(ExtractionRule::kLastInteger, last_integer(text, false));
}

Extraction recursive(std::string_view text, const std::vector<ExecutedCall>& calls) {
  if (auto v = last_answer_tag(text, false)) return hit(ExtractionRule::kAnswerTag, v);
  if (auto v = tool_result(calls, true, nullptr)) return hit(ExtractionRule::kLastToolResult, v);
  if (auto v = last_answer_phrase(text, false)) return hit(ExtractionRule::kAnswerPhrase, v);
  if (auto v = last_value_of_phrase(text)) return hit(ExtractionRule::kValueOfPhrase, v);
  return hit(ExtractionRule::kLastInteger, last_integer(text, false));
}

}  // namespace

const char* extraction_rule_name(ExtractionRule rule) {
  switch (rule) {
    case ExtractionRule::kNone: return "none";
    case ExtractionRule::kAnswerTag: return "answer_tag";
    case ExtractionRule::kAnswerPhrase: return "answer_phrase";
    case ExtractionRule::kTrailingEquals: return "trailing_equals";
    case ExtractionRule::kFirstToolResult: return "first_tool_result";
    case ExtractionRule::kFirstFetchResult: return "first_fetch_result";
    case ExtractionRule::kLastToolResult: return "last_tool_result";
    case ExtractionRule::kValueOfPhrase: return "value_of_phrase";
    case ExtractionRule::kLastInteger: return "last_integer";
  }
  return "?";
}

Extraction extract_answer(TaskKind kind, std::string_view text, const std::vector<ExecutedCall>& calls) {
  switch (kind) {
    case TaskKind::kCompositional: return compositional(text);
    case TaskKind::kSimple: return simple(text, calls);
    case TaskKind::kMultiStep: return multi_step(text, calls);
    case TaskKind::kRecursive: return recursive(text, calls);
  }
  return Extraction{};
}

}  // namespace zorplex
