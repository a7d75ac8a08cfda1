// Trajectories, demonstrations and the evaluation summary (plain C++, no
// libtorch): the loss mask leaves out the prompt and every injected tool
// result, demonstrations solve their tasks through the real tools (and each
// flaw breaks exactly what it names), the demonstration stream is a pure
// function of its options, the summary counts what it says, and a
// transcript line gives back each turn as the rollout saw it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "policy/tokenizer.h"
#include "rollout/demonstrations.h"
#include "rollout/eval_summary.h"
#include "rollout/trajectory.h"
#include "rollout/transcript_writer.h"
#include "zorplex/zorplex.h"

using namespace rollout;
using policy::TokenId;

namespace {

std::vector<TokenId> ids(const std::string& text, bool eos = false) {
  std::vector<TokenId> out = policy::encode(text);
  if (eos) out.push_back(policy::kEos);
  return out;
}

std::vector<float> log_probs_for(const std::vector<TokenId>& tokens, float first) {
  std::vector<float> out;
  for (std::size_t i = 0; i < tokens.size(); ++i) out.push_back(first - 0.01f * static_cast<float>(i));
  return out;
}

std::string text_of(const Trajectory& t, std::size_t begin, std::size_t end) {
  return policy::decode(std::vector<TokenId>(t.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                             t.tokens.begin() + static_cast<std::ptrdiff_t>(end)));
}

}  // namespace

TEST_CASE("trajectory: the prompt and injected tool results are masked out, model tokens are in",
          "[rl][rollout]") {
  zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 42);
  const zorplex::Task task = generator.next();  // umbrella + dog = 125 (30 + 95)
  REQUIRE(task.words == std::vector<std::string>{"umbrella", "dog"});
  policy::PromptFormat format;
  TrajectoryBuilder builder(task, generator.tools(), format);
  const std::vector<TokenId> prompt = policy::encode_prompt(format, task.question);
  REQUIRE(builder.context() == prompt);

  const std::vector<std::vector<TokenId>> turns = {ids("LOOKUP[umbrella]"), ids("lookup['dog']"),
                                                   ids("30 + 95 = 125. [ANSWER] 125", true)};
  std::vector<std::vector<float>> turn_log_probs;
  for (std::size_t i = 0; i < turns.size(); ++i) {
    turn_log_probs.push_back(log_probs_for(turns[i], -0.5f - static_cast<float>(i)));
    const bool over = builder.add_turn(turns[i], turn_log_probs.back());
    CHECK(over == (i + 1 == turns.size()));
  }
  const Trajectory t = builder.finish(zorplex::Shaping::kOriginal);

  // Walk the sequence: prompt, turn 1, injection, turn 2, injection, turn 3.
  REQUIRE(t.tokens.size() == t.generated.size());
  REQUIRE(t.tokens.size() == t.log_probs.size());
  CHECK(t.prompt_tokens == prompt.size());
  std::size_t pos = 0;
  for (; pos < prompt.size(); ++pos) {
    CHECK(t.tokens[pos] == prompt[pos]);
    CHECK(t.generated[pos] == 0);
    CHECK(t.log_probs[pos] == 0.0f);
  }
  const std::vector<std::string> injections = {"\n[Result: 30]\n", "\n[Result: 95]\n", ""};
  for (std::size_t turn = 0; turn < turns.size(); ++turn) {
    for (std::size_t j = 0; j < turns[turn].size(); ++j, ++pos) {
      CHECK(t.tokens[pos] == turns[turn][j]);
      CHECK(t.generated[pos] == 1);
      CHECK(t.log_probs[pos] == turn_log_probs[turn][j]);
    }
    const std::size_t injection_begin = pos;
    for (std::size_t j = 0; j < injections[turn].size(); ++j, ++pos) {
      CHECK(t.generated[pos] == 0);
      CHECK(t.log_probs[pos] == 0.0f);
    }
    CHECK(text_of(t, injection_begin, pos) == injections[turn]);
  }
  CHECK(pos == t.tokens.size());
  CHECK(t.generated_tokens() == turns[0].size() + turns[1].size() + turns[2].size());
  CHECK(policy::decode(std::vector<TokenId>(t.tokens.begin() + static_cast<std::ptrdiff_t>(t.prompt_tokens),
                                            t.tokens.end())) == t.transcript);
  // Every masked-out byte after the prompt belongs to an injected result.
  std::string masked_text;
  for (std::size_t i = t.prompt_tokens; i < t.tokens.size(); ++i) {
    if (t.generated[i] == 0) masked_text.push_back(static_cast<char>(t.tokens[i]));
  }
  CHECK(masked_text == injections[0] + injections[1]);

  CHECK(t.turns == 3);
  CHECK(t.end == zorplex::EpisodeEnd::kAnswered);
  CHECK_FALSE(t.truncated);
  CHECK(t.score.correct);
  CHECK(t.score.tool_calls == 2);
  CHECK(t.score.failure_mode == zorplex::FailureMode::kSuccess);
  CHECK(t.score.reward == Approx(1.2));
}

TEST_CASE("trajectory: a turn without a tool call ends the episode, and later turns change nothing",
          "[rl][rollout]") {
  zorplex::TaskGenerator generator(zorplex::TaskKind::kSimple, zorplex::Difficulty::kEasy, 3);
  TrajectoryBuilder builder(generator.next(), generator.tools(), policy::PromptFormat{});
  const std::vector<TokenId> rambling = ids("I think it is big", true);
  CHECK(builder.add_turn(rambling, std::vector<float>(rambling.size(), -1.0f)));
  const std::size_t size = builder.context().size();
  CHECK(builder.add_turn(ids("LOOKUP[cat]"), std::vector<float>(11, -1.0f)));
  CHECK(builder.context().size() == size);
  const Trajectory t = builder.finish(zorplex::Shaping::kOriginal);
  CHECK(t.end == zorplex::EpisodeEnd::kNoToolCall);
  CHECK(t.turns == 1);
  CHECK(t.score.failure_mode == zorplex::FailureMode::kWrongFormat);
  CHECK_THROWS_AS(builder.add_turn(ids("ab"), std::vector<float>(3, 0.0f)), std::invalid_argument);
}

TEST_CASE("trajectory: truncate() ends an episode that ran out of context", "[rl][rollout]") {
  zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 5);
  TrajectoryBuilder builder(generator.next(), generator.tools(), policy::PromptFormat{});
  CHECK_FALSE(builder.add_turn(ids("LOOKUP[cat]"), std::vector<float>(11, -1.0f)));
  builder.truncate();
  CHECK(builder.over());
  const Trajectory t = builder.finish(zorplex::Shaping::kOriginal);
  CHECK(t.truncated);
  CHECK(t.end == zorplex::EpisodeEnd::kNotOver);
  CHECK(t.score.tool_calls == 1);
}

TEST_CASE("transcripts: one line per trajectory with each turn's text, tool calls and results as the rollout saw them",
          "[rl][rollout][transcripts]") {
  zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 42);
  const zorplex::Task task = generator.next();  // umbrella + dog = 125 (30 + 95)
  TrajectoryBuilder builder(task, generator.tools(), policy::PromptFormat{});
  // Turn 1 calls two tools at once; turn 2 answers under a newer version.
  const std::vector<TokenId> first = ids("LOOKUP[umbrella] LOOKUP[dog]");
  const std::vector<TokenId> second = ids("30 + 95 = 125. [ANSWER] 125", true);
  builder.add_turn(first, std::vector<float>(first.size(), -1.0f), std::vector<std::uint64_t>(first.size(), 3));
  builder.add_turn(second, std::vector<float>(second.size(), -1.0f),
                   std::vector<std::uint64_t>(second.size(), 4));
  const Trajectory t = builder.finish(zorplex::Shaping::kOriginal);
  REQUIRE(t.score.correct);

  const std::vector<TranscriptTurn> turns = transcript_turns(t);
  REQUIRE(turns.size() == 2);
  CHECK(turns[0].model == "LOOKUP[umbrella] LOOKUP[dog]");
  REQUIRE(turns[0].tool_calls.size() == 2);
  CHECK(turns[0].tool_calls[1].name == "LOOKUP");
  CHECK(turns[0].tool_calls[1].argument == "dog");
  CHECK(turns[0].tool_result == "\n[Result: 30, 95]\n");
  CHECK(turns[1].model == "30 + 95 = 125. [ANSWER] 125");  // EOS dropped
  CHECK(turns[1].tool_calls.empty());
  CHECK(turns[1].tool_result.empty());
  // The turns put back together are the transcript the reward was computed on.
  std::string joined;
  for (const TranscriptTurn& turn : turns) joined += turn.model + turn.tool_result;
  CHECK(joined == t.transcript);

  TranscriptContext context;
  context.generator = 2;
  context.round = 7;
  context.group_sequence = 29;
  context.index_in_group = 5;
  context.task_seed = 2000042;
  context.task_index = 1;
  context.data_epoch = 3;
  context.temperature = 0.7;
  const std::string line = transcript_line(context, t);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.size() < 2048);  // the bound --help states for Zorplex lines
  const auto j = nlohmann::json::parse(line);
  CHECK(j.at("generator") == 2);
  CHECK(j.at("round") == 7);
  CHECK(j.at("group_sequence") == 29);
  CHECK(j.at("index_in_group") == 5);
  CHECK(j.at("task_seed") == 2000042);
  CHECK(j.at("task_index") == 1);
  CHECK(j.at("data_epoch") == 3);
  CHECK(j.at("temperature") == Approx(0.7));
  CHECK(j.at("sent") == true);
  CHECK(j.at("kind") == "compositional");
  CHECK(j.at("difficulty") == "easy");
  CHECK(j.at("question") == task.question);
  CHECK(j.at("answer") == 125);
  CHECK(j.at("prompt") == policy::render(policy::encode_prompt(policy::PromptFormat{}, task.question)));
  REQUIRE(j.at("turns").size() == 2);
  CHECK(j.at("turns")[0].at("model") == "LOOKUP[umbrella] LOOKUP[dog]");
  CHECK(j.at("turns")[0].at("tool_calls")[0].at("argument") == "umbrella");
  CHECK(j.at("turns")[0].at("tool_result") == "\n[Result: 30, 95]\n");
  CHECK(j.at("end") == "answered");
  CHECK(j.at("reward") == Approx(t.score.reward));
  CHECK(j.at("correct") == true);
  CHECK(j.at("failure_mode") == "success");
  CHECK(j.at("tool_calls") == 2);
  CHECK(j.at("oldest_version") == 3);  // from token_versions
  CHECK(j.at("newest_version") == 4);
  CHECK(j.at("generated_tokens") == t.generated_tokens());
  CHECK(j.at("tokens") == t.tokens.size());

  // Weights pulled between rounds: the round's version stands for every token.
  context.version = 9;
  context.sent = false;
  const auto between = nlohmann::json::parse(transcript_line(context, t));
  CHECK(between.at("oldest_version") == 9);
  CHECK(between.at("newest_version") == 9);
  CHECK(between.at("sent") == false);

  // A byte the model wrote that is not UTF-8 still gives one line of JSON.
  TrajectoryBuilder odd(task, generator.tools(), policy::PromptFormat{});
  const std::vector<TokenId> bytes{0xff, 0xfe, '\n', 'x'};
  odd.add_turn(bytes, std::vector<float>(bytes.size(), -1.0f));
  const std::string odd_line = transcript_line(context, odd.finish(zorplex::Shaping::kOriginal));
  CHECK(odd_line.find('\n') == std::string::npos);
  CHECK_NOTHROW(nlohmann::json::parse(odd_line));

  // The writer appends whole lines once per flush.
  const std::string path = "/tmp/ws_transcripts_test_" + std::to_string(std::random_device{}()) + ".jsonl";
  std::remove(path.c_str());
  {
    auto writer = TranscriptWriter::open(path);
    REQUIRE(writer);
    writer.value()->add(line);
    writer.value()->add(odd_line);
    CHECK(writer.value()->lines_written() == 0);  // buffered until the round ends
    writer.value()->flush();
    CHECK(writer.value()->lines_written() == 2);
  }
  {
    auto again = TranscriptWriter::open(path);  // a resumed generator appends
    REQUIRE(again);
    again.value()->add(line);
  }  // flushed on close
  std::FILE* in = std::fopen(path.c_str(), "r");
  REQUIRE(in != nullptr);
  std::string text;
  for (int c = std::fgetc(in); c != EOF; c = std::fgetc(in)) text.push_back(static_cast<char>(c));
  std::fclose(in);
  std::remove(path.c_str());
  CHECK(text == line + "\n" + odd_line + "\n" + line + "\n");
  CHECK(transcripts_file("/tmp/", 3) == "/tmp/transcripts-generator-3.jsonl");
  CHECK(transcripts_file("/tmp/run-transcripts.jsonl", 3) == "/tmp/run-transcripts.jsonl");
}

TEST_CASE("demonstrations: perfect ones solve every kind through the real tools", "[rl][demonstrations]") {
  struct Case {
    zorplex::TaskKind kind;
    zorplex::Difficulty difficulty;
  };
  const std::vector<Case> cases = {{zorplex::TaskKind::kSimple, zorplex::Difficulty::kEasy},
                                   {zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy},
                                   {zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium},
                                   {zorplex::TaskKind::kCompositional, zorplex::Difficulty::kHard},
                                   {zorplex::TaskKind::kMultiStep, zorplex::Difficulty::kEasy},
                                   {zorplex::TaskKind::kRecursive, zorplex::Difficulty::kEasy}};
  std::mt19937_64 rng(1);
  for (const Case& c : cases) {
    for (std::int64_t seed = 0; seed < 5; ++seed) {
      zorplex::TaskGenerator generator(c.kind, c.difficulty, seed);
      for (int i = 0; i < 20; ++i) {
        const zorplex::Task task = generator.next();
        auto demo = demonstrate(task, generator.tools(), Flaw::kNone, rng);
        if (!demo) {
          // Only a recursive chain too long for the turn limit is skipped.
          CHECK(c.kind == zorplex::TaskKind::kRecursive);
          CHECK(task.chain.size() > static_cast<std::size_t>(zorplex::kMaxTurns - 1));
          continue;
        }
        const Trajectory t = demonstration_trajectory(task, generator.tools(), *demo, policy::PromptFormat{});
        INFO(zorplex::kind_name(c.kind) << " seed " << seed << " task " << i << ": " << t.transcript);
        CHECK(t.score.correct);
        CHECK(t.score.extraction.rule == zorplex::ExtractionRule::kAnswerTag);
        CHECK(t.score.failure_mode == zorplex::FailureMode::kSuccess);
        CHECK(t.end == zorplex::EpisodeEnd::kAnswered);
        CHECK(t.tokens.back() == policy::kEos);
        std::size_t expected_calls = 1;
        if (c.kind == zorplex::TaskKind::kCompositional) expected_calls = task.words.size();
        if (c.kind == zorplex::TaskKind::kMultiStep) expected_calls = 2;
        if (c.kind == zorplex::TaskKind::kRecursive) expected_calls = task.chain.size();
        CHECK(t.score.tool_calls == static_cast<int>(expected_calls));
      }
    }
  }
}

TEST_CASE("demonstrations: the arithmetic is written out left to right", "[rl][demonstrations]") {
  std::mt19937_64 rng(1);
  zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 42);
  const zorplex::Task task = generator.next();
  auto demo = demonstrate(task, generator.tools(), Flaw::kNone, rng);
  REQUIRE(demo);
  CHECK(demo->turns == std::vector<std::string>{"LOOKUP[umbrella]", "LOOKUP[dog]",
                                                "30 + 95: 0+5+0=5, 3+9+0=12. 30 + 95 = 125. [ANSWER] 125"});
  auto plain = demonstrate(task, generator.tools(), Flaw::kNone, rng, Arithmetic::kPlain);
  REQUIRE(plain);
  CHECK(plain->turns.back() == "30 + 95 = 125. [ANSWER] 125");
  auto padded = demonstrate(task, generator.tools(), Flaw::kNone, rng, Arithmetic::kPaddedColumns);
  REQUIRE(padded);
  CHECK(padded->turns.back() == "30 + 95: 0+5+0=5, 3+9+0=12. 30 + 95 = 125. [ANSWER] 125");  // one width already
  CHECK(rollout::parse_arithmetic("padded").value() == Arithmetic::kPaddedColumns);
  CHECK(std::string(rollout::arithmetic_name(Arithmetic::kPaddedColumns)) == "padded");
  CHECK_FALSE(rollout::parse_arithmetic("wide"));

  // Operands of different widths are padded to the wider one's: seed 44's
  // table has queen = 100 and night = 2 (the columns the default scratchpad
  // lets slip).
  zorplex::TaskGenerator mixed(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 44);
  const zorplex::Task night_queen = mixed.next();  // night + queen = 102
  REQUIRE(night_queen.words == std::vector<std::string>{"night", "queen"});
  auto wide = demonstrate(night_queen, mixed.tools(), Flaw::kNone, rng, Arithmetic::kPaddedColumns);
  REQUIRE(wide);
  CHECK(wide->turns.back() == "002 + 100: 2+0+0=2, 0+0+0=0, 0+1+0=1. 2 + 100 = 102. [ANSWER] 102");
  auto narrow = demonstrate(night_queen, mixed.tools(), Flaw::kNone, rng);
  REQUIRE(narrow);
  CHECK(narrow->turns.back() == "2 + 100: 2+0+0=2, 0+0+0=0, 0+1+0=1. 2 + 100 = 102. [ANSWER] 102");

  zorplex::TaskGenerator hard(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kHard, 7);
  const zorplex::Task three = hard.next();  // kite * elephant * moon = 1568
  auto hard_demo = demonstrate(three, hard.tools(), Flaw::kNone, rng);
  REQUIRE(hard_demo);
  REQUIRE(hard_demo->turns.size() == 4);
  const std::string& last = hard_demo->turns.back();
  CHECK(last.find(", ") != std::string::npos);
  CHECK(last.size() > std::string(" = 1568. [ANSWER] 1568").size());
  CHECK(last.substr(last.size() - std::string(" = 1568. [ANSWER] 1568").size()) == " = 1568. [ANSWER] 1568");
}

TEST_CASE("demonstrations: column sums carry correctly and compose to the total", "[rl][demonstrations]") {
  // The expected text is rebuilt here from a and b: columns are the digits
  // from the ones up, the carry in is the tens of the previous column's sum,
  // and the digits compose to a + b. 300 easy tasks cover one- to
  // three-digit operands (values are 1..100).
  std::mt19937_64 rng(0);
  int three_digit = 0;
  for (std::int64_t seed = 0; seed < 100; ++seed) {
    zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, seed);
    for (int i = 0; i < 3; ++i) {
      const zorplex::Task task = generator.next();
      auto demo = demonstrate(task, generator.tools(), Flaw::kNone, rng);
      REQUIRE(demo);
      const std::int64_t a = *generator.tools().execute({zorplex::kLookup, task.words[0]}).number;
      const std::int64_t b = *generator.tools().execute({zorplex::kLookup, task.words[1]}).number;
      std::string expected = std::to_string(a) + " + " + std::to_string(b) + ":";
      std::int64_t x = a, y = b, carry = 0, total = 0, scale = 1;
      for (int column = 0; column == 0 || x > 0 || y > 0; ++column) {
        const std::int64_t sum = x % 10 + y % 10 + carry;
        expected += (column ? ", " : " ") + std::to_string(x % 10) + "+" + std::to_string(y % 10) + "+" +
                    std::to_string(carry) + "=" + std::to_string(sum);
        total += (sum % 10) * scale;
        carry = sum / 10;
        scale *= 10;
        x /= 10;
        y /= 10;
        three_digit += column == 2 ? 1 : 0;
      }
      total += carry * scale;
      REQUIRE(total == a + b);
      REQUIRE(task.answer == a + b);
      INFO(demo->turns.back());
      CHECK(demo->turns.back() == expected + ". " + std::to_string(a) + " + " + std::to_string(b) + " = " +
                                      std::to_string(a + b) + ". [ANSWER] " + std::to_string(a + b));
    }
  }
  CHECK(three_digit > 0);  // a value of 100 was among them
}

namespace {

// "x op y = z" pieces of a column step such as "12-5-0=7" or "7*6+4=46".
struct ColumnStep {
  std::int64_t first, second, third, result;
};

// The steps of a column list "12-5-0=7, 7-3-1=3" written with the two
// operator characters op1 and op2; empty when the text is not of that shape.
std::vector<ColumnStep> column_steps(const std::string& text, char op1, char op2) {
  std::vector<ColumnStep> steps;
  std::size_t at = 0;
  while (at < text.size()) {
    ColumnStep step{};
    char a = 0, b = 0, eq = 0;
    int used = 0;
    long long first = 0, second = 0, third = 0, result = 0;
    if (std::sscanf(text.c_str() + at, "%lld%c%lld%c%lld%c%lld%n", &first, &a, &second, &b, &third, &eq, &result,
                    &used) != 7 ||
        a != op1 || b != op2 || eq != '=') {
      return {};
    }
    step = {first, second, third, result};
    steps.push_back(step);
    at += static_cast<std::size_t>(used);
    if (text.compare(at, 2, ", ") == 0) at += 2;
    else if (at != text.size()) return {};
  }
  return steps;
}

// The text between "<head>: " and the next '.' or ';' after it.
std::string section(const std::string& text, const std::string& head) {
  const std::size_t start = text.find(head + ": ");
  if (start == std::string::npos) return "";
  const std::size_t from = start + head.size() + 2;
  return text.substr(from, text.find_first_of(".;", from) - from);
}

}  // namespace

TEST_CASE("demonstrations: subtraction borrows and multiplication's partial products compose to the answer",
          "[rl][demonstrations]") {
  // Every column is checked against the arithmetic it claims, not against a
  // second copy of the formatter: a subtraction's columns are top digit
  // (plus 10 when it borrows) minus bottom digit minus the borrow in, their
  // results are the digits of |a - b|; a multiplication's steps are digit x
  // digit + carry, composing to each partial product, and the partial
  // products' columns sum to a * b. 600 medium tasks hold about 200 of each.
  std::mt19937_64 rng(0);
  int subtractions = 0, negative = 0, borrows = 0, multiplications = 0, two_digit_multipliers = 0;
  for (std::int64_t seed = 0; seed < 200; ++seed) {
    zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium, seed);
    for (int i = 0; i < 3; ++i) {
      const zorplex::Task task = generator.next();
      auto demo = demonstrate(task, generator.tools(), Flaw::kNone, rng);
      REQUIRE(demo);
      const std::string& text = demo->turns.back();
      INFO(text);
      const std::int64_t a = *generator.tools().execute({zorplex::kLookup, task.words[0]}).number;
      const std::int64_t b = *generator.tools().execute({zorplex::kLookup, task.words[1]}).number;
      REQUIRE(task.answer);
      const std::string answer = std::to_string(*task.answer);
      const std::string ending = " = " + answer + ". [ANSWER] " + answer;
      REQUIRE(text.size() > ending.size());
      CHECK(text.substr(text.size() - ending.size()) == ending);
      if (task.op == '-') {
        ++subtractions;
        const std::int64_t top = std::max(a, b), bottom = std::min(a, b);
        if (a < b) {
          ++negative;
          CHECK(text.find(std::to_string(a) + " - " + std::to_string(b) + " = -(" + std::to_string(b) + " - " +
                          std::to_string(a) + "). ") == 0);
        }
        const auto steps = column_steps(section(text, std::to_string(top) + " - " + std::to_string(bottom)), '-', '-');
        REQUIRE_FALSE(steps.empty());
        std::int64_t x = top, y = bottom, borrow = 0, difference = 0, scale = 1;
        for (const ColumnStep& step : steps) {
          CHECK(step.first % 10 == x % 10);  // the top digit, 10 added or not
          CHECK(step.first - step.first % 10 == (step.first >= 10 ? 10 : 0));
          CHECK(step.second == y % 10);
          CHECK(step.third == borrow);
          CHECK(step.result == step.first - step.second - step.third);
          CHECK(step.result >= 0);
          CHECK(step.result <= 9);
          borrow = step.first >= 10 ? 1 : 0;
          borrows += borrow;
          difference += step.result * scale;
          scale *= 10;
          x /= 10;
          y /= 10;
        }
        CHECK(borrow == 0);
        CHECK(difference == top - bottom);
        CHECK(task.answer == a - b);
      } else if (task.op == '*' && b >= 100) {
        CHECK(text.find(':') == std::string::npos);  // a three-digit multiplier: written plain
      } else if (task.op == '*') {
        ++multiplications;
        std::vector<std::int64_t> partials;
        std::vector<std::int64_t> digits{b % 10};
        if (b >= 10) digits.push_back(b / 10);
        for (std::int64_t digit : digits) {
          const auto steps = column_steps(section(text, std::to_string(a) + "*" + std::to_string(digit)), '*', '+');
          REQUIRE_FALSE(steps.empty());
          std::int64_t x = a, carry = 0, product = 0, scale = 1;
          for (std::size_t k = 0; k < steps.size(); ++k) {
            CHECK(steps[k].first == x % 10);
            CHECK(steps[k].second == digit);
            CHECK(steps[k].third == carry);
            CHECK(steps[k].result == steps[k].first * steps[k].second + steps[k].third);
            carry = steps[k].result / 10;
            product += (k + 1 == steps.size() ? steps[k].result : steps[k].result % 10) * scale;
            scale *= 10;
            x /= 10;
          }
          CHECK(product == a * digit);
          partials.push_back(product);
        }
        if (b >= 10) {
          ++two_digit_multipliers;
          const std::string sum_head = std::to_string(partials[0]) + " + " + std::to_string(partials[1] * 10);
          const auto steps = column_steps(section(text, sum_head), '+', '+');
          REQUIRE_FALSE(steps.empty());
          std::int64_t total = 0, scale = 1;
          for (std::size_t k = 0; k < steps.size(); ++k) {
            CHECK(steps[k].result == steps[k].first + steps[k].second + steps[k].third);
            total += (k + 1 == steps.size() ? steps[k].result : steps[k].result % 10) * scale;
            scale *= 10;
          }
          CHECK(total == a * b);
        }
        CHECK(task.answer == a * b);
      }
    }
  }
  CHECK(subtractions > 100);
  CHECK(negative > 20);
  CHECK(borrows > 20);
  CHECK(multiplications > 100);
  CHECK(two_digit_multipliers > 50);
}

namespace {

// Columns of a + b (from the ones up) that take a carry in, counted from the
// arithmetic, not from any text.
int addition_carries(std::int64_t a, std::int64_t b) {
  int carries = 0;
  for (std::int64_t carry = 0; a > 0 || b > 0; a /= 10, b /= 10) {
    carries += carry > 0 ? 1 : 0;
    carry = (a % 10 + b % 10 + carry) / 10;
  }
  return carries;
}

// Columns of a - b (a >= b) that take a borrow in.
int subtraction_borrows(std::int64_t a, std::int64_t b) {
  int borrows = 0;
  for (std::int64_t borrow = 0; a > 0 || b > 0; a /= 10, b /= 10) {
    borrows += borrow > 0 ? 1 : 0;
    borrow = a % 10 < b % 10 + borrow ? 1 : 0;
  }
  return borrows;
}

// a * digit: the digit products that take a carry in.
int product_carries(std::int64_t a, std::int64_t digit) {
  int carries = 0;
  for (std::int64_t carry = 0; a > 0; a /= 10) {
    carries += carry > 0 ? 1 : 0;
    carry = (a % 10 * digit + carry) / 10;
  }
  return carries;
}

}  // namespace

TEST_CASE("demonstrations: carries_in counts the columns that take a carry or borrow in", "[rl][demonstrations]") {
  // 95 + 95: 5+5+0=10, 9+9+1=19 has one; the expected counts come from the
  // arithmetic above, for every operator of 300 medium tasks.
  int with_carries = 0, without = 0;
  for (std::int64_t seed = 0; seed < 100; ++seed) {
    zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium, seed);
    for (int i = 0; i < 3; ++i) {
      const zorplex::Task task = generator.next();
      const std::int64_t a = *generator.tools().execute({zorplex::kLookup, task.words[0]}).number;
      const std::int64_t b = *generator.tools().execute({zorplex::kLookup, task.words[1]}).number;
      int expected = 0;
      if (task.op == '+') expected = addition_carries(a, b);
      if (task.op == '-') expected = subtraction_borrows(std::max(a, b), std::min(a, b));
      if (task.op == '*' && b < 100) {
        expected = product_carries(a, b % 10);
        if (b >= 10) expected += product_carries(a, b / 10) + addition_carries(a * (b % 10), a * (b / 10) * 10);
      }
      INFO(task.question << " " << a << " " << task.op << " " << b);
      CHECK(carries_in(task, generator.tools()) == expected);
      (expected > 0 ? with_carries : without) += 1;
    }
  }
  CHECK(with_carries > 50);  // both cases were seen
  CHECK(without > 50);
  zorplex::TaskGenerator simple(zorplex::TaskKind::kSimple, zorplex::Difficulty::kEasy, 1);
  CHECK(carries_in(simple.next(), simple.tools()) == 0);
}

TEST_CASE("demonstrations: each flaw breaks what it names", "[rl][demonstrations]") {
  std::mt19937_64 rng(2);
  for (std::int64_t seed = 0; seed < 10; ++seed) {
    zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, seed);
    const zorplex::Task task = generator.next();
    auto score = [&](Flaw flaw) {
      auto demo = demonstrate(task, generator.tools(), flaw, rng);
      REQUIRE(demo);
      CHECK(demo->flaw == flaw);
      return demonstration_trajectory(task, generator.tools(), *demo, policy::PromptFormat{}).score;
    };
    const zorplex::Score wrong = score(Flaw::kWrongAnswer);
    CHECK_FALSE(wrong.correct);
    CHECK(wrong.has_answer_tag);
    CHECK(wrong.tool_calls == 2);
    const zorplex::Score untagged = score(Flaw::kNoAnswerTag);
    CHECK_FALSE(untagged.has_answer_tag);
    CHECK(untagged.correct);  // "30 + 95 = 125." still extracts by the "= <int>" rule
    CHECK(untagged.extraction.rule == zorplex::ExtractionRule::kTrailingEquals);
    const zorplex::Score extra = score(Flaw::kExtraCall);
    CHECK(extra.tool_calls == 3);
    CHECK(extra.correct);
    CHECK(extra.reward == Approx(1.1));
    const zorplex::Score guess = score(Flaw::kGuess);
    CHECK(guess.tool_calls == 1);
  }
}

TEST_CASE("demonstrations: the stream is a pure function of its options and index", "[rl][demonstrations]") {
  DemonstrationOptions options;
  options.mix = {TaskMix{zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy},
                 TaskMix{zorplex::TaskKind::kSimple, zorplex::Difficulty::kEasy}};
  options.first_task_seed = 500;
  options.tasks_per_seed = 3;
  options.imperfect_fraction = 0.5;
  options.seed = 9;
  const DemonstrationStream a(options);
  const DemonstrationStream b(options);
  int flawed = 0;
  for (std::uint64_t i = 0; i < 60; ++i) {
    const Trajectory x = a.at(i);
    const Trajectory y = b.at(i);
    CHECK(x.tokens == y.tokens);
    CHECK(x.generated == y.generated);
    // Blocks of tasks_per_seed alternate between the mix entries.
    const bool compositional = (i / 3) % 2 == 0;
    CHECK(x.task.kind == (compositional ? zorplex::TaskKind::kCompositional : zorplex::TaskKind::kSimple));
    flawed +=
        x.score.correct && x.score.has_answer_tag && x.score.tool_calls == (compositional ? 2 : 1) ? 0 : 1;
  }
  CHECK(a.at(7).tokens == a.at(7).tokens);
  CHECK(a.at(7).tokens != a.at(8).tokens);
  CHECK(flawed > 10);  // about half are flawed (some flaws, e.g. a lucky guess, still look perfect)
  CHECK(flawed < 50);
  CHECK(a.last_task_seed(0) == 499);
  CHECK(a.last_task_seed(1) == 500);
  CHECK(a.last_task_seed(60) == 519);

  options.imperfect_fraction = 0.0;
  const DemonstrationStream perfect(options);
  for (std::uint64_t i = 0; i < 30; ++i)
    CHECK(perfect.at(i).score.failure_mode == zorplex::FailureMode::kSuccess);

  options.mix.clear();
  CHECK_FALSE(options.validate().empty());
  CHECK_THROWS_AS(DemonstrationStream(options), std::invalid_argument);
}

TEST_CASE("demonstrations: task mixes parse and name themselves", "[rl][demonstrations]") {
  auto mix = parse_task_mix("compositional:hard");
  REQUIRE(mix.ok());
  CHECK(mix.value().kind == zorplex::TaskKind::kCompositional);
  CHECK(mix.value().difficulty == zorplex::Difficulty::kHard);
  CHECK(task_mix_name(mix.value()) == "compositional:hard");
  CHECK(task_mix_name(parse_task_mix("recursive").value()) == "recursive");
  CHECK_FALSE(parse_task_mix("compositional:extreme").ok());
  CHECK(parse_task_mix("cooking").error().message.find("simple, compositional") != std::string::npos);
}

TEST_CASE("eval summary: counts, rates and JSON from known trajectories", "[rl][eval]") {
  std::mt19937_64 rng(4);
  zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 11);
  std::vector<Trajectory> trajectories;
  const std::vector<Flaw> flaws = {Flaw::kNone, Flaw::kNone, Flaw::kWrongAnswer, Flaw::kNoAnswerTag};
  for (Flaw flaw : flaws) {
    const zorplex::Task task = generator.next();
    trajectories.push_back(demonstration_trajectory(
        task, generator.tools(), *demonstrate(task, generator.tools(), flaw, rng), policy::PromptFormat{}));
  }
  EvalSummary s = summarize(trajectories, 400, 2.0);
  CHECK(s.tasks == 4);
  CHECK(s.correct == 3);  // the untagged one is still correct
  CHECK(s.accuracy == Approx(0.75));
  CHECK(s.format_rate == Approx(0.75));
  CHECK(s.tag_rate == Approx(0.75));
  CHECK(s.avg_turns == Approx(3.0));
  CHECK(s.avg_tool_calls == Approx(2.0));
  CHECK(s.failure_modes.at("success") == 3);
  CHECK(s.failure_modes.at("wrong_answer") == 1);
  CHECK(s.failure_modes.at("wrong_format") == 0);
  CHECK(s.failure_modes.at("tool_spam") == 0);
  CHECK(s.tokens_per_second == Approx(200.0));
  CHECK(s.avg_reward == Approx((1.2 + 1.2 + 0.2 + 1.0) / 4));
  const auto j = nlohmann::json::parse(to_json(s));
  CHECK(j.at("accuracy").get<double>() == Approx(0.75));
  CHECK(j.at("failure_modes").at("success").get<int>() == 3);
  CHECK(j.at("tokens_per_second").get<double>() == Approx(200.0));
  const std::string text = table(s);
  CHECK(text.find("accuracy               75.0 %") != std::string::npos);

  const EvalSummary empty = summarize({}, 0, 0.0);
  CHECK(empty.accuracy == 0.0);
  CHECK(empty.tokens_per_second == 0.0);
}
