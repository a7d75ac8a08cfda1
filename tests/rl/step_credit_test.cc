// Step credit (algorithms/step_credit.h): where a trajectory's first wrong
// arithmetic step is, and which tokens keep its advantage.
#include <catch2/catch.hpp>

#include <string>

#include "algorithms/step_credit.h"

namespace {

constexpr std::size_t kPrompt = 4;  // made-up prompt tokens before the assistant text

// A trajectory whose assistant text is `text`; the parts between '{' and '}'
// are injected by the environment (not generated) and the braces dropped.
rollout::Trajectory trajectory_of(const std::string& text) {
  rollout::Trajectory t;
  for (std::size_t i = 0; i < kPrompt; ++i) {
    t.tokens.push_back(258);  // a special token
    t.generated.push_back(0);
  }
  bool injected = false;
  for (char c : text) {
    if (c == '{' || c == '}') {
      injected = c == '{';
      continue;
    }
    t.tokens.push_back(static_cast<unsigned char>(c));
    t.generated.push_back(injected ? 0 : 1);
  }
  t.prompt_tokens = kPrompt;
  t.log_probs.assign(t.tokens.size(), 0.0f);
  t.token_versions.assign(t.tokens.size(), 0);
  return t;
}

// The token index of the n-th (0-based) occurrence of `needle` in the text
// (braces dropped), plus `offset`.
std::size_t token_at(const std::string& text, const std::string& needle, std::size_t offset = 0, int n = 0) {
  std::string plain;
  for (char c : text) {
    if (c != '{' && c != '}') plain.push_back(c);
  }
  std::size_t at = plain.find(needle);
  for (int k = 0; k < n; ++k) at = plain.find(needle, at + 1);
  REQUIRE(at != std::string::npos);
  return kPrompt + at + offset;
}

const std::string kRightMultiplication =
    "LOOKUP[kite]\n{[Result: 87]}\nLOOKUP[moon]\n{[Result: 70]}\n87 * 70: 87*0: 7*0+0=0, 8*0+0=0; 87*7: 7*7+0=49, "
    "8*7+4=60; 0 + 6090: 0+0+0=0, 0+9+0=9, 0+0+0=0, 0+6+0=6. 87 * 70 = 6090. [ANSWER] 6090";

}  // namespace

TEST_CASE("step credit: a worked answer whose every step is right has no error", "[rl][credit]") {
  CHECK_FALSE(algorithms::first_arithmetic_error(trajectory_of(kRightMultiplication)).has_value());
  // Subtraction the other way round, and negative results.
  CHECK_FALSE(algorithms::first_arithmetic_error(
                  trajectory_of("14 - 65 = -(65 - 14). 65 - 14: 5-4-0=1, 6-1-0=5. 14 - 65 = -51. [ANSWER] -51"))
                  .has_value());
  // Precedence: * before + and -.
  CHECK_FALSE(algorithms::first_arithmetic_error(trajectory_of("2+3*4=14, 10-2*3-1=3")).has_value());
  CHECK_FALSE(algorithms::first_arithmetic_error(trajectory_of("no steps at all. [ANSWER] 12")).has_value());
}

TEST_CASE("step credit: the first wrong step is found at its first wrong digit", "[rl][credit]") {
  // 8*7+4 is 60: the '6' is right, the '9' is the first wrong token.
  std::string text = kRightMultiplication;
  text.replace(text.find("8*7+4=60"), 8, "8*7+4=69");
  CHECK(algorithms::first_arithmetic_error(trajectory_of(text)) == token_at(text, "8*7+4=69", 7));

  // Two wrong steps: the first one in the text counts.
  const std::string two = "7*6+0=43, 4*6+4=29";
  CHECK(algorithms::first_arithmetic_error(trajectory_of(two)) == token_at(two, "43", 1));

  // A wrong sign: "-41" against -51 differs at its second character.
  const std::string sign = "14 - 65 = -41. [ANSWER] -41";
  CHECK(algorithms::first_arithmetic_error(trajectory_of(sign)) == token_at(sign, "-41", 1));

  // A result cut short ("6" for 60): the token after it is the first wrong one.
  const std::string short_result = "8*7+4=6, 4*6+4=28";
  CHECK(algorithms::first_arithmetic_error(trajectory_of(short_result)) == token_at(short_result, ",", 0));

  // Precedence matters: 2+3*4 is 14, so "=20" is wrong at its first digit.
  const std::string precedence = "2+3*4=20";
  CHECK(algorithms::first_arithmetic_error(trajectory_of(precedence)) == token_at(precedence, "20", 0));
}

TEST_CASE("step credit: text the model did not write, and numbers too long to check, are skipped",
          "[rl][credit]") {
  // A wrong claim inside an injected tool result is not the model's.
  const std::string injected = "{[Result: 2+2=5]}\n3+4=8";
  CHECK(algorithms::first_arithmetic_error(trajectory_of(injected)) == token_at(injected, "3+4=8", 4));
  // 19-digit numbers are not checked (no overflow, no false alarm).
  CHECK_FALSE(algorithms::first_arithmetic_error(trajectory_of("9999999999999999999*9=1")).has_value());
  // A result at the very end of the text: 10, written 11, wrong at its second digit.
  const std::string at_end = "5+5=11";
  CHECK(algorithms::first_arithmetic_error(trajectory_of(at_end)) == token_at(at_end, "11", 1));
}

TEST_CASE("step credit: a negative advantage from the first error on, a positive one before it", "[rl][credit]") {
  std::string text = kRightMultiplication;
  text.replace(text.find("8*7+4=60"), 8, "8*7+4=69");
  const rollout::Trajectory wrong = trajectory_of(text);
  const std::size_t error = token_at(text, "8*7+4=69", 7);
  using Range = std::pair<std::size_t, std::size_t>;
  CHECK(algorithms::credited_tokens(wrong, -0.7) == Range{error, wrong.tokens.size()});
  CHECK(algorithms::credited_tokens(wrong, 0.7) == Range{0, error});
  CHECK(algorithms::credited_tokens(wrong, 0.0) == Range{0, wrong.tokens.size()});
  const rollout::Trajectory right = trajectory_of(kRightMultiplication);
  CHECK(algorithms::credited_tokens(right, -0.7) == Range{0, right.tokens.size()});
  CHECK(algorithms::credited_tokens(right, 0.7) == Range{0, right.tokens.size()});
}
