// algorithms/step_credit.cc: see step_credit.h.
#include "algorithms/step_credit.h"

#include <cstdint>
#include <string>
#include <vector>

namespace algorithms {
namespace {

constexpr std::size_t kMaxDigits = 18;  // 10^18 < 2^63: parsed without overflow

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_operator(char c) { return c == '+' || c == '-' || c == '*'; }

// The assistant text after the prompt, one character per token (the
// tokenizer is byte-level; a special token becomes '\n', which no claim spans).
std::string text_of(const rollout::Trajectory& t) {
  std::string text;
  for (std::size_t i = t.prompt_tokens; i < t.tokens.size(); ++i) {
    const auto id = t.tokens[i];
    text.push_back(id >= 0 && id < 256 ? static_cast<char>(id) : '\n');
  }
  return text;
}

struct Claim {
  std::size_t result_begin;  // in text
  std::string written;       // the result as written, sign included
  std::int64_t value;        // the expression's value
};

// Reads digits at text[i...] into *value; false past kMaxDigits or none.
bool read_number(const std::string& text, std::size_t& i, std::int64_t* value) {
  const std::size_t begin = i;
  std::int64_t v = 0;
  while (i < text.size() && is_digit(text[i])) {
    if (i - begin >= kMaxDigits) return false;
    v = v * 10 + (text[i] - '0');
    ++i;
  }
  *value = v;
  return i > begin;
}

// An expression starting at text[i] (a digit not preceded by a digit):
// NUMBER (SP? OP SP? NUMBER)+ SP? '=' SP? '-'? NUMBER, with SP one space.
// On success fills *claim and returns true; i is left after the result (or
// where the parse failed, never before the start + 1).
bool parse_claim(const std::string& text, std::size_t& i, Claim* claim) {
  const auto skip_space = [&](std::size_t& j) {
    if (j < text.size() && text[j] == ' ') ++j;
  };
  std::int64_t number = 0;
  if (!read_number(text, i, &number)) {
    ++i;
    return false;
  }
  // Precedence: sum of terms, each term a product of numbers.
  std::int64_t sum = 0;
  std::int64_t term = number;
  int operators = 0;
  for (;;) {
    std::size_t j = i;
    skip_space(j);
    if (j >= text.size()) return false;
    const char c = text[j];
    if (c == '=') {
      if (operators == 0) return false;
      ++j;
      skip_space(j);
      std::string written;
      const std::size_t result_begin = j;
      if (j < text.size() && text[j] == '-') {
        written.push_back('-');
        ++j;
      }
      std::int64_t result = 0;
      const std::size_t digits_begin = j;
      if (!read_number(text, j, &result)) return false;
      written.append(text, digits_begin, j - digits_begin);
      i = j;
      *claim = {result_begin, written, sum + term};
      return true;
    }
    if (!is_operator(c)) return false;
    ++j;
    skip_space(j);
    std::int64_t next = 0;
    if (j >= text.size() || !is_digit(text[j]) || !read_number(text, j, &next)) return false;
    if (c == '*') {
      term *= next;
    } else {
      sum += term;
      term = c == '+' ? next : -next;
    }
    if (term > 1'000'000'000'000'000LL || term < -1'000'000'000'000'000LL) return false;
    ++operators;
    i = j;
  }
}

}  // namespace

std::optional<std::size_t> first_arithmetic_error(const rollout::Trajectory& t) {
  const std::string text = text_of(t);
  const auto generated = [&](std::size_t text_index) {
    const std::size_t token = t.prompt_tokens + text_index;
    return token < t.generated.size() && t.generated[token] != 0;
  };
  std::size_t i = 0;
  while (i < text.size()) {
    if (!is_digit(text[i]) || (i > 0 && is_digit(text[i - 1]))) {
      ++i;
      continue;
    }
    const std::size_t start = i;
    Claim claim{};
    if (!parse_claim(text, i, &claim)) {
      // Go on from the next character: a claim may start inside what failed
      // ("-(72 - 35). 72 - 35: 12-5-0=7" holds "12-5-0=7").
      i = start + 1;
      continue;
    }
    const std::string right = std::to_string(claim.value);
    std::size_t differ = 0;
    while (differ < claim.written.size() && differ < right.size() && claim.written[differ] == right[differ]) ++differ;
    if (differ == claim.written.size() && differ == right.size()) continue;  // a right claim
    std::size_t at = claim.result_begin + differ;  // the first wrong character, or the one after a short result
    bool result_generated = true;
    for (std::size_t k = claim.result_begin; k < claim.result_begin + claim.written.size(); ++k) {
      result_generated = result_generated && generated(k);
    }
    if (!result_generated) continue;
    while (at < text.size() && !generated(at)) ++at;
    if (at >= text.size()) at = claim.result_begin + claim.written.size() - 1;
    return t.prompt_tokens + at;
  }
  return std::nullopt;
}

std::pair<std::size_t, std::size_t> credited_tokens(const rollout::Trajectory& t, double advantage) {
  const std::size_t size = t.tokens.size();
  if (advantage == 0.0) return {0, size};
  const std::optional<std::size_t> error = first_arithmetic_error(t);
  if (!error) return {0, size};
  return advantage < 0.0 ? std::make_pair(*error, size) : std::make_pair(std::size_t{0}, *error);
}

}  // namespace algorithms
