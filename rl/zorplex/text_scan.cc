#include "zorplex/text_scan.h"

#include <limits>

namespace zorplex {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_ascii_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_word_char(char c) {
  return is_ascii_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

namespace {
char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}
char upper(char c) {
  return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
}
}  // namespace

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = lower(c);
  return out;
}

std::string ascii_upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = upper(c);
  return out;
}

bool matches_icase(std::string_view text, std::size_t pos, std::string_view pattern) {
  if (pos > text.size() || text.size() - pos < pattern.size()) return false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (lower(text[pos + i]) != lower(pattern[i])) return false;
  }
  return true;
}

std::size_t skip_spaces(std::string_view text, std::size_t pos) {
  while (pos < text.size() && is_ascii_space(text[pos])) ++pos;
  return pos;
}

std::size_t skip_digits(std::string_view text, std::size_t pos) {
  while (pos < text.size() && is_ascii_digit(text[pos])) ++pos;
  return pos;
}

TextInteger make_text_integer(bool negative, std::string_view digits) {
  std::size_t first = 0;
  while (first + 1 < digits.size() && digits[first] == '0') ++first;
  std::string_view magnitude = digits.substr(first);
  TextInteger out;
  const bool zero = magnitude == "0";
  out.decimal = (negative && !zero ? "-" : "") + std::string(magnitude);
  // Accumulate negatively so that INT64_MIN fits.
  std::int64_t value = 0;
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  for (char c : magnitude) {
    const int digit = c - '0';
    if (value < (kMin + digit) / 10) return out;
    value = value * 10 - digit;
  }
  if (!negative) {
    if (value == kMin) return out;
    value = -value;
  }
  out.value = value;
  return out;
}

TextInteger make_text_integer(std::int64_t value) {
  return TextInteger{std::to_string(value), value};
}

}  // namespace zorplex
