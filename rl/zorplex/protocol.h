// zorplex/protocol.h: the conversation protocol between a model and the
// Zorplex tools: finding tool calls, the text that injects their results,
// and when a turn stops.
//
// Contract
// - A tool call is NAME[arg] with NAME one of LOOKUP, GETKEY, FETCH in any
//   case, and arg a run of word characters with an optional ' or " on either
//   side (LOOKUP[apple], lookup['apple'], LOOKUP["apple"]); a FETCH argument
//   must start with ZK_ (any case). Calls are found left to right, without
//   overlap, and returned in text order with the canonical upper-case name.
//   Every kind recognises all three names; a tool the kind does not offer
//   answers UNKNOWN_TOOL (tools.h).
// - Results are injected into the same assistant text as "\n[Result: v]\n",
//   several results of one turn joined by ", ".
// - The stop rule (check_turn_stop) carries the fix of the original's defect:
//   an "[ANSWER] <integer>" is complete only once a character that is not a
//   digit follows the digits, or at end of sequence, so a multi-digit answer
//   is never cut to its first digit.
// - Pure functions; safe from any thread. Nothing here fails: text that is
//   not a tool call is simply not one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zorplex/tools.h"

namespace zorplex {

// The original's per-turn token budget and turns per episode.
constexpr int kTurnTokenBudget = 150;
constexpr int kMaxTurns = 5;

// Every parsable tool call in text, in order.
std::vector<ToolCall> parse_tool_calls(std::string_view text);

// "\n[Result: <r1>, <r2>, ...]\n" for the results of one turn.
std::string result_injection(const std::vector<ToolResult>& results);

// Why a turn stops (or kContinue: keep generating).
enum class TurnStop { kContinue, kAnswer, kToolCall, kEndOfSequence, kTokenBudget };
const char* turn_stop_name(TurnStop stop);

// Whether the turn whose text so far is turn_text must stop, and why; the
// first reason that applies, in this order: a complete answer (see above;
// at end_of_sequence a trailing "[ANSWER] 12" is complete), a complete tool
// call (NAME[...] with NAME as above and anything but ']' inside, as the
// original's stop pattern), end of sequence, tokens_generated >= token_budget.
// The answer tag is matched in any case here, as the original's stop rule did.
TurnStop check_turn_stop(std::string_view turn_text, bool end_of_sequence, int tokens_generated = 0,
                         int token_budget = kTurnTokenBudget);

// Whether text holds "[ANSWER]" (any case), optional spaces, an integer.
// A turn that does ends the episode.
bool contains_answer(std::string_view text);

}  // namespace zorplex
