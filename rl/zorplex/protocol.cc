#include "zorplex/protocol.h"

#include <array>

#include "zorplex/keys.h"
#include "zorplex/text_scan.h"

namespace zorplex {
namespace {

constexpr std::array<const char*, 3> kToolNames = {kLookup, kGetKey, kFetch};
constexpr std::string_view kAnswerTag = "[ANSWER]";

bool is_quote(char c) {
  return c == '\'' || c == '"';
}

// A call starting at pos: NAME\[['"]?(\w+)['"]?\] (FETCH: (ZK_\w+)).
// On success fills *call and *end (just past the ']').
bool call_at(std::string_view text, std::size_t pos, ToolCall* call, std::size_t* end) {
  for (const char* name : kToolNames) {
    const std::string_view name_view(name);
    if (!matches_icase(text, pos, name_view)) continue;
    std::size_t p = pos + name_view.size();
    if (p >= text.size() || text[p] != '[') return false;
    ++p;
    if (p < text.size() && is_quote(text[p])) ++p;
    const std::size_t arg_begin = p;
    while (p < text.size() && is_word_char(text[p])) ++p;
    const std::string_view arg = text.substr(arg_begin, p - arg_begin);
    if (arg.empty()) return false;
    if (name_view == kFetch && (arg.size() <= kKeyPrefix.size() || !matches_icase(arg, 0, kKeyPrefix))) {
      return false;
    }
    if (p < text.size() && is_quote(text[p])) ++p;
    if (p >= text.size() || text[p] != ']') return false;
    call->name = name;
    call->argument = std::string(arg);
    *end = p + 1;
    return true;
  }
  return false;
}

// NAME\[[^\]]+\] anywhere (the original's stop pattern).
bool has_bracketed_call(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    for (const char* name : kToolNames) {
      const std::string_view name_view(name);
      if (!matches_icase(text, pos, name_view)) continue;
      const std::size_t open = pos + name_view.size();
      if (open >= text.size() || text[open] != '[') continue;
      const std::size_t close = text.find(']', open + 1);
      if (close != std::string_view::npos && close > open + 1) return true;
    }
  }
  return false;
}

// For each "[ANSWER]" (any case) followed by optional spaces, an optional
// minus and digits: whether one is complete (a character follows the
// digits, or the text ends at end of sequence), or at least present.
enum class AnswerState { kNone, kPresent, kComplete };

AnswerState answer_state(std::string_view text, bool end_of_sequence) {
  AnswerState state = AnswerState::kNone;
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    if (!matches_icase(text, pos, kAnswerTag)) continue;
    std::size_t p = skip_spaces(text, pos + kAnswerTag.size());
    if (p < text.size() && text[p] == '-') ++p;
    const std::size_t digits_end = skip_digits(text, p);
    if (digits_end == p) continue;
    if (digits_end < text.size() || end_of_sequence) return AnswerState::kComplete;
    state = AnswerState::kPresent;
  }
  return state;
}

}  // namespace

std::vector<ToolCall> parse_tool_calls(std::string_view text) {
  std::vector<ToolCall> calls;
  std::size_t pos = 0;
  while (pos < text.size()) {
    ToolCall call;
    std::size_t end = 0;
    if (call_at(text, pos, &call, &end)) {
      calls.push_back(std::move(call));
      pos = end;
    } else {
      ++pos;
    }
  }
  return calls;
}

std::string result_injection(const std::vector<ToolResult>& results) {
  std::string out = "\n[Result: ";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i > 0) out += ", ";
    out += results[i].text;
  }
  out += "]\n";
  return out;
}

const char* turn_stop_name(TurnStop stop) {
  switch (stop) {
    case TurnStop::kContinue: return "continue";
    case TurnStop::kAnswer: return "answer";
    case TurnStop::kToolCall: return "tool_call";
    case TurnStop::kEndOfSequence: return "end_of_sequence";
    case TurnStop::kTokenBudget: return "token_budget";
  }
  return "?";
}

TurnStop check_turn_stop(std::string_view turn_text, bool end_of_sequence, int tokens_generated,
                         int token_budget) {
  if (answer_state(turn_text, end_of_sequence) == AnswerState::kComplete) return TurnStop::kAnswer;
  if (has_bracketed_call(turn_text)) return TurnStop::kToolCall;
  if (end_of_sequence) return TurnStop::kEndOfSequence;
  if (tokens_generated >= token_budget) return TurnStop::kTokenBudget;
  return TurnStop::kContinue;
}

bool contains_answer(std::string_view text) {
  return answer_state(text, /*end_of_sequence=*/true) != AnswerState::kNone;
}

}  // namespace zorplex
