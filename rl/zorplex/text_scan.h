// zorplex/text_scan.h: the character classes and small scanners that the
// tool-call parser, the stop rule and the answer extraction share.
//
// Contract
// - ASCII only, byte by byte: the original's regular expressions ran in
//   Python's Unicode mode, where \d, \w, \s and IGNORECASE also cover
//   non-ASCII digits, letters, spaces and case pairs. Here \d is [0-9], \w is
//   [A-Za-z0-9_], \s is [ \t\n\r\f\v], and case folding is ASCII. Non-ASCII
//   bytes are never digits, word characters or spaces.
// - Pure functions on string_views; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zorplex {

bool is_ascii_space(char c);
bool is_ascii_digit(char c);
bool is_word_char(char c);
std::string ascii_lower(std::string_view text);
std::string ascii_upper(std::string_view text);

// Whether text[pos..] starts with pattern, ASCII case-insensitively.
bool matches_icase(std::string_view text, std::size_t pos, std::string_view pattern);
// The first position >= pos that is not an ASCII space (text.size() if none).
std::size_t skip_spaces(std::string_view text, std::size_t pos);
// The first position >= pos that is not a digit.
std::size_t skip_digits(std::string_view text, std::size_t pos);

// An integer found in text, as Python's int() reads it: the canonical decimal
// ("007" -> "7", "-0" -> "0") and the value when it fits in 64 bits (a longer
// number can still be extracted; it just equals no task's answer).
struct TextInteger {
  std::string decimal;
  std::optional<std::int64_t> value;
};

// digits must be non-empty and all digits.
TextInteger make_text_integer(bool negative, std::string_view digits);
TextInteger make_text_integer(std::int64_t value);

}  // namespace zorplex
