// zorplex/patterns.h: the text patterns of the answer-extraction rules, each
// written as a hand scanner that returns what Python's re.findall(...)[-1]
// (or re.search) returns for the original's regular expression.
//
// Contract
// - Pure functions; safe from any thread; linear or, for
//   last_value_of_phrase, at most quadratic in one line's length.
// - ASCII semantics as in text_scan.h. "allow_minus" selects the
//   compositional form of a pattern (-?\d+) over the other kinds' (\d+).
// - Each returns std::nullopt when the pattern does not occur.
#pragma once

#include <optional>
#include <string_view>

#include "zorplex/text_scan.h"

namespace zorplex {

// The last "[ANSWER]" (case-sensitive), optional spaces, an integer:
// \[ANSWER\]\s*(-?\d+).
std::optional<TextInteger> last_answer_tag(std::string_view text, bool allow_minus);

// The last "the answer is" / "answer is" / "answer:" (any case), optional
// spaces, an integer: (?:the answer is|answer is|answer:)\s*(-?\d+).
std::optional<TextInteger> last_answer_phrase(std::string_view text, bool allow_minus);

// "= <int>" at the very end of the text, optionally followed by "." and
// trailing spaces: =\s*(-?\d+)\.?\s*$ (the original also accepted
// "The answer" after it; the spec asks for the end of the text only).
std::optional<TextInteger> trailing_equals(std::string_view text);

// The last "value of <anything on the line> is" (any case), optional spaces,
// an integer: (?:value of .+ is)\s*(\d+), with '.' not matching '\n' and the
// greedy '.+' trying the last " is" of the line first, as the regex does.
std::optional<TextInteger> last_value_of_phrase(std::string_view text);

// The last integer anywhere: -?\d+ (allow_minus) or \d+.
std::optional<TextInteger> last_integer(std::string_view text, bool allow_minus);

}  // namespace zorplex
