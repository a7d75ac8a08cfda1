#include "zorplex/patterns.h"

namespace zorplex {
namespace {

// An integer starting at pos (after the optional spaces the caller skipped):
// -?\d+ or \d+. On success *end is the first position after the digits.
std::optional<TextInteger> integer_at(std::string_view text, std::size_t pos, bool allow_minus,
                                      std::size_t* end) {
  bool negative = false;
  if (allow_minus && pos < text.size() && text[pos] == '-') {
    negative = true;
    ++pos;
  }
  const std::size_t digits_end = skip_digits(text, pos);
  if (digits_end == pos) return std::nullopt;
  *end = digits_end;
  return make_text_integer(negative, text.substr(pos, digits_end - pos));
}

}  // namespace

std::optional<TextInteger> last_answer_tag(std::string_view text, bool allow_minus) {
  constexpr std::string_view kTag = "[ANSWER]";
  std::optional<TextInteger> last;
  std::size_t pos = text.find(kTag);
  while (pos != std::string_view::npos) {
    std::size_t end = 0;
    std::optional<TextInteger> value =
        integer_at(text, skip_spaces(text, pos + kTag.size()), allow_minus, &end);
    if (value) {
      last = std::move(value);
      pos = text.find(kTag, end);
    } else {
      pos = text.find(kTag, pos + 1);
    }
  }
  return last;
}

std::optional<TextInteger> last_answer_phrase(std::string_view text, bool allow_minus) {
  // "the answer is" ends where the "answer is" inside it ends, so both give the
  // same integer: looking for "answer is" and "answer:" is enough. A match ends
  // inside a run of digits, where no later keyword can start, so matches found
  // this way never overlap and the last one is findall()'s last.
  std::optional<TextInteger> last;
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    std::size_t after = 0;
    if (matches_icase(text, pos, "answer is")) {
      after = pos + 9;
    } else if (matches_icase(text, pos, "answer:")) {
      after = pos + 7;
    } else {
      continue;
    }
    std::size_t end = 0;
    std::optional<TextInteger> value = integer_at(text, skip_spaces(text, after), allow_minus, &end);
    if (value) last = std::move(value);
  }
  return last;
}

std::optional<TextInteger> trailing_equals(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0 && is_ascii_space(text[end - 1])) --end;
  if (end > 0 && text[end - 1] == '.') --end;
  std::size_t begin = end;
  while (begin > 0 && is_ascii_digit(text[begin - 1])) --begin;
  if (begin == end) return std::nullopt;
  bool negative = false;
  std::size_t before = begin;
  if (before > 0 && text[before - 1] == '-') {
    negative = true;
    --before;
  }
  while (before > 0 && is_ascii_space(text[before - 1])) --before;
  if (before == 0 || text[before - 1] != '=') return std::nullopt;
  return make_text_integer(negative, text.substr(begin, end - begin));
}

std::optional<TextInteger> last_value_of_phrase(std::string_view text) {
  constexpr std::string_view kHead = "value of ";
  constexpr std::string_view kTail = " is";
  std::optional<TextInteger> last;
  std::size_t pos = 0;
  while (pos + kHead.size() <= text.size()) {
    if (!matches_icase(text, pos, kHead)) {
      ++pos;
      continue;
    }
    const std::size_t any_begin = pos + kHead.size();  // '.+' starts here
    std::size_t line_end = text.find('\n', any_begin);
    if (line_end == std::string_view::npos) line_end = text.size();
    bool matched = false;
    // Greedy '.+': the latest " is" on the line first, at least one character
    // between "value of " and it.
    for (std::size_t tail = line_end >= kTail.size() ? line_end - kTail.size() : 0;
         tail >= any_begin + 1 && tail + kTail.size() <= line_end; --tail) {
      if (!matches_icase(text, tail, kTail)) continue;
      std::size_t end = 0;
      std::optional<TextInteger> value =
          integer_at(text, skip_spaces(text, tail + kTail.size()), /*allow_minus=*/false, &end);
      if (value) {
        last = std::move(value);
        pos = end;
        matched = true;
        break;
      }
    }
    if (!matched) ++pos;
  }
  return last;
}

std::optional<TextInteger> last_integer(std::string_view text, bool allow_minus) {
  std::size_t end = text.size();
  while (end > 0 && !is_ascii_digit(text[end - 1])) --end;
  if (end == 0) return std::nullopt;
  std::size_t begin = end;
  while (begin > 0 && is_ascii_digit(text[begin - 1])) --begin;
  const bool negative = allow_minus && begin > 0 && text[begin - 1] == '-';
  return make_text_integer(negative, text.substr(begin, end - begin));
}

}  // namespace zorplex
