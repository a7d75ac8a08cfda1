// rollout/demonstrations.cc: see demonstrations.h.
#include "rollout/demonstrations.h"

#include <algorithm>
#include <regex>
#include <utility>
#include <stdexcept>

#include "zorplex/protocol.h"

namespace rollout {
namespace {

using zorplex::TaskKind;
using zorplex::ToolCall;
using zorplex::ToolResult;

constexpr std::string_view kSeePrefix = "SEE: ";

std::string call_text(const char* name, const std::string& argument) {
  return std::string(name) + "[" + argument + "]";
}

std::int64_t uniform(std::mt19937_64& rng, std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
}

// A nonzero offset in -9..-1, 1..9.
std::int64_t wrong_by(std::mt19937_64& rng) {
  const std::int64_t magnitude = uniform(rng, 1, 9);
  return uniform(rng, 0, 1) == 0 ? -magnitude : magnitude;
}

std::int64_t apply(char op, std::int64_t a, std::int64_t b) {
  switch (op) {
    case '-': return a - b;
    case '*': return a * b;
    default: return a + b;
  }
}

std::string final_turn(const std::string& working, std::int64_t answer, Flaw flaw) {
  if (flaw == Flaw::kNoAnswerTag) return working.empty() ? std::to_string(answer) + "." : working;
  const std::string tag = "[ANSWER] " + std::to_string(answer);
  return working.empty() ? tag : working + " " + tag;
}

// Both operands written with the wider one's digits, leading zeros filled in
// ("002", "100"), so that a column's two digits sit the same distance back in
// both (Arithmetic::kPaddedColumns).
std::pair<std::string, std::string> operand_texts(std::int64_t a, std::int64_t b, bool padded) {
  std::string left = std::to_string(a);
  std::string right = std::to_string(b);
  if (padded) {
    const std::size_t width = std::max(left.size(), right.size());
    left.insert(0, width - left.size(), '0');
    right.insert(0, width - right.size(), '0');
  }
  return {left, right};
}

// "0+5+0=5, 3+9+0=12": the column sums from the ones up, each with the carry
// in from the column before (the tens of its sum). a, b >= 0.
std::string addition_steps(std::int64_t a, std::int64_t b) {
  std::string text;
  std::int64_t carry = 0;
  for (int column = 0; column == 0 || a > 0 || b > 0; ++column) {
    const std::int64_t da = a % 10;
    const std::int64_t db = b % 10;
    const std::int64_t sum = da + db + carry;
    text += (column == 0 ? "" : ", ") + std::to_string(da) + "+" + std::to_string(db) + "+" +
            std::to_string(carry) + "=" + std::to_string(sum);
    carry = sum / 10;
    a /= 10;
    b /= 10;
  }
  return text;
}

// "a + b: 0+5+0=5, 3+9+0=12." (padded: "002 + 100: 2+0+0=2, ...").
std::string addition_columns(std::int64_t a, std::int64_t b, bool padded) {
  const auto [left, right] = operand_texts(a, b, padded);
  return left + " + " + right + ": " + addition_steps(a, b) + ".";
}

// "72 - 35: 12-5-0=7, 7-3-1=3." : from the ones up, each column's top digit
// (with 10 added when it must borrow, which the next column pays back as
// its third term) minus the bottom digit minus the borrow in. a >= b >= 0.
std::string subtraction_steps(std::int64_t a, std::int64_t b) {
  std::string text;
  std::int64_t borrow = 0;
  for (int column = 0; column == 0 || a > 0 || b > 0; ++column) {
    const std::int64_t da = a % 10;
    const std::int64_t db = b % 10;
    const bool borrows = da < db + borrow;
    const std::int64_t top = da + (borrows ? 10 : 0);
    text += (column == 0 ? "" : ", ") + std::to_string(top) + "-" + std::to_string(db) + "-" +
            std::to_string(borrow) + "=" + std::to_string(top - db - borrow);
    borrow = borrows ? 1 : 0;
    a /= 10;
    b /= 10;
  }
  return text;
}

// a >= b: "72 - 35: 12-5-0=7, 7-3-1=3."; a < b, the difference the other way
// round, negated: "35 - 72 = -(72 - 35). 72 - 35: 12-5-0=7, 7-3-1=3."
std::string subtraction_columns(std::int64_t a, std::int64_t b, bool padded) {
  if (a < b) {
    return std::to_string(a) + " - " + std::to_string(b) + " = -(" + std::to_string(b) + " - " +
           std::to_string(a) + "). " + subtraction_columns(b, a, padded);
  }
  const auto [left, right] = operand_texts(a, b, padded);
  return left + " - " + right + ": " + subtraction_steps(a, b) + ".";
}

// "47*6: 7*6+0=42, 4*6+4=28" : a times one digit, from a's ones up, each
// digit's product plus the carry in (the tens of the step before).
std::string digit_product_steps(std::int64_t a, std::int64_t digit) {
  std::string text = std::to_string(a) + "*" + std::to_string(digit) + ":";
  std::int64_t carry = 0;
  for (int column = 0; column == 0 || a > 0; ++column) {
    const std::int64_t value = (a % 10) * digit + carry;
    text += (column == 0 ? " " : ", ") + std::to_string(a % 10) + "*" + std::to_string(digit) + "+" +
            std::to_string(carry) + "=" + std::to_string(value);
    carry = value / 10;
    a /= 10;
  }
  return text;
}

// b < 10: "47 * 6: 47*6: 7*6+0=42, 4*6+4=28."
// b < 100: the two partial products, then their sum in columns:
// "47 * 36: 47*6: 7*6+0=42, 4*6+4=28; 47*3: 7*3+0=21, 4*3+2=14;
//  282 + 1410: 2+0+0=2, 8+1+0=9, 2+4+0=6, 0+1+0=1." a >= 0, 0 <= b < 100.
std::string multiplication_columns(std::int64_t a, std::int64_t b) {
  std::string text = std::to_string(a) + " * " + std::to_string(b) + ": " + digit_product_steps(a, b % 10);
  if (b < 10) return text + ".";
  const std::int64_t ones = a * (b % 10);
  const std::int64_t tens = a * (b / 10) * 10;
  return text + "; " + digit_product_steps(a, b / 10) + "; " + std::to_string(ones) + " + " +
         std::to_string(tens) + ": " + addition_steps(ones, tens) + ".";
}

// The column working for acc op value, or "" where there is none (plain
// arithmetic, a negative operand, a multiplier of three digits).
std::string column_working(char op, std::int64_t a, std::int64_t b, Arithmetic arithmetic) {
  const bool padded = arithmetic == Arithmetic::kPaddedColumns;
  if (arithmetic == Arithmetic::kPlain || a < 0 || b < 0) return "";
  switch (op) {
    case '+': return addition_columns(a, b, padded);
    case '-': return subtraction_columns(a, b, padded);
    case '*': return b < 100 ? multiplication_columns(a, b) : "";
    default: return "";
  }
}

std::optional<Demonstration> compositional(const zorplex::Task& task, const zorplex::Toolbox& tools,
                                           Flaw flaw, Arithmetic arithmetic, std::mt19937_64& rng) {
  Demonstration demo;
  demo.flaw = flaw;
  std::vector<std::int64_t> values;
  for (std::size_t i = 0; i < task.words.size(); ++i) {
    const bool last = i + 1 == task.words.size();
    if (flaw == Flaw::kGuess && last) {
      values.push_back(uniform(rng, 1, 100));
      continue;
    }
    demo.turns.push_back(call_text(zorplex::kLookup, task.words[i]));
    const ToolResult result = tools.execute(ToolCall{zorplex::kLookup, task.words[i]});
    if (!result.number) return std::nullopt;
    values.push_back(*result.number);
    if (flaw == Flaw::kExtraCall && i == 0) demo.turns.push_back(call_text(zorplex::kLookup, task.words[i]));
  }
  std::string working;
  std::int64_t acc = values[0];
  for (std::size_t i = 1; i < values.size(); ++i) {
    std::int64_t next = apply(task.op, acc, values[i]);
    const std::string steps = column_working(task.op, acc, values[i], arithmetic);
    const bool columns = !steps.empty();
    if (flaw == Flaw::kWrongAnswer && i + 1 == values.size()) next += wrong_by(rng);
    if (i > 1) working += columns ? " " : ", ";
    if (columns) working += steps + " ";
    working +=
        std::to_string(acc) + " " + task.op + " " + std::to_string(values[i]) + " = " + std::to_string(next);
    if (columns) working += ".";
    acc = next;
  }
  if (working.back() != '.') working += ".";
  demo.turns.push_back(final_turn(working, acc, flaw));
  return demo;
}

// simple and recursive: LOOKUP, following redirects.
std::optional<Demonstration> lookups(const zorplex::Task& task, const zorplex::Toolbox& tools, Flaw flaw,
                                     std::mt19937_64& rng) {
  Demonstration demo;
  demo.flaw = flaw;
  std::string word = task.words.empty() ? std::string() : task.words[0];
  std::vector<std::string> chain;
  std::optional<std::int64_t> value;
  for (int hop = 0; hop < zorplex::kMaxTurns - 1 && !value; ++hop) {
    chain.push_back(word);
    const ToolResult result = tools.execute(ToolCall{zorplex::kLookup, word});
    if (result.number) {
      value = result.number;
    } else if (result.text.rfind(kSeePrefix, 0) == 0) {
      word = result.text.substr(kSeePrefix.size());
    } else {
      return std::nullopt;
    }
  }
  if (!value) return std::nullopt;
  std::int64_t answer = *value;
  if (flaw == Flaw::kGuess) {
    chain.pop_back();
    answer = uniform(rng, 1, 100);
  }
  for (std::size_t i = 0; i < chain.size(); ++i) {
    demo.turns.push_back(call_text(zorplex::kLookup, chain[i]));
    if (flaw == Flaw::kExtraCall && i == 0) demo.turns.push_back(call_text(zorplex::kLookup, chain[i]));
  }
  if (demo.turns.size() >= static_cast<std::size_t>(zorplex::kMaxTurns)) return std::nullopt;
  if (flaw == Flaw::kWrongAnswer) answer += wrong_by(rng);
  demo.turns.push_back(final_turn("", answer, flaw));
  return demo;
}

std::optional<Demonstration> multi_step(const zorplex::Task& task, const zorplex::Toolbox& tools, Flaw flaw,
                                        std::mt19937_64& rng) {
  Demonstration demo;
  demo.flaw = flaw;
  if (task.words.empty()) return std::nullopt;
  const std::string& word = task.words[0];
  const ToolResult key = tools.execute(ToolCall{zorplex::kGetKey, word});
  const ToolResult value = tools.execute(ToolCall{zorplex::kFetch, key.text});
  if (!value.number) return std::nullopt;
  std::int64_t answer = *value.number;
  demo.turns.push_back(call_text(zorplex::kGetKey, word));
  if (flaw == Flaw::kExtraCall) demo.turns.push_back(call_text(zorplex::kGetKey, word));
  if (flaw == Flaw::kGuess) {
    answer = uniform(rng, 1, 100);
  } else {
    demo.turns.push_back(call_text(zorplex::kFetch, key.text));
  }
  if (flaw == Flaw::kWrongAnswer) answer += wrong_by(rng);
  demo.turns.push_back(final_turn("", answer, flaw));
  return demo;
}

// splitmix64: a well-mixed 64-bit seed from (seed, index).
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

const char* arithmetic_name(Arithmetic arithmetic) {
  switch (arithmetic) {
    case Arithmetic::kColumns: return "columns";
    case Arithmetic::kPaddedColumns: return "padded";
    case Arithmetic::kPlain: return "plain";
  }
  return "?";
}

zorplex::Result<Arithmetic> parse_arithmetic(const std::string& name) {
  if (name == "columns") return Arithmetic::kColumns;
  if (name == "padded") return Arithmetic::kPaddedColumns;
  if (name == "plain") return Arithmetic::kPlain;
  return zorplex::Error{"unknown arithmetic style '" + name + "': expected columns, padded or plain"};
}

const char* flaw_name(Flaw flaw) {
  switch (flaw) {
    case Flaw::kNone: return "none";
    case Flaw::kWrongAnswer: return "wrong_answer";
    case Flaw::kNoAnswerTag: return "no_answer_tag";
    case Flaw::kExtraCall: return "extra_call";
    case Flaw::kGuess: return "guess";
  }
  return "?";
}

std::optional<Demonstration> demonstrate(const zorplex::Task& task, const zorplex::Toolbox& tools, Flaw flaw,
                                         std::mt19937_64& rng, Arithmetic arithmetic) {
  if (!task.answer) return std::nullopt;
  switch (task.kind) {
    case TaskKind::kCompositional: return compositional(task, tools, flaw, arithmetic, rng);
    case TaskKind::kMultiStep: return multi_step(task, tools, flaw, rng);
    case TaskKind::kSimple:
    case TaskKind::kRecursive: return lookups(task, tools, flaw, rng);
  }
  return std::nullopt;
}

int carries_in(const zorplex::Task& task, const zorplex::Toolbox& tools) {
  if (task.kind != zorplex::TaskKind::kCompositional) return 0;
  std::mt19937_64 unused(0);  // a flawless demonstration draws nothing
  const auto demo = demonstrate(task, tools, Flaw::kNone, unused, Arithmetic::kColumns);
  if (!demo || demo->turns.empty()) return 0;
  // A column step: digit op digit, then + or - the carry (borrow) in, "=".
  static const std::regex kColumnStep(R"((\d+)[-+*](\d+)[-+](\d+)=)");
  const std::string& working = demo->turns.back();
  int carries = 0;
  for (auto it = std::sregex_iterator(working.begin(), working.end(), kColumnStep); it != std::sregex_iterator();
       ++it) {
    if ((*it)[3].str() != "0") ++carries;
  }
  return carries;
}

Trajectory demonstration_trajectory(const zorplex::Task& task, const zorplex::Toolbox& tools,
                                    const Demonstration& demo, const policy::PromptFormat& format) {
  TrajectoryBuilder builder(task, tools, format);
  for (std::size_t i = 0; i < demo.turns.size(); ++i) {
    std::vector<TokenId> tokens = policy::encode(demo.turns[i]);
    if (i + 1 == demo.turns.size()) tokens.push_back(policy::kEos);
    builder.add_turn(tokens, std::vector<float>(tokens.size(), 0.0f));
  }
  return builder.finish(zorplex::Shaping::kOriginal);
}

zorplex::Result<TaskMix> parse_task_mix(const std::string& text) {
  const std::size_t colon = text.find(':');
  auto kind = zorplex::parse_kind(text.substr(0, colon));
  if (!kind) return kind.error();
  TaskMix mix;
  mix.kind = kind.value();
  if (colon != std::string::npos) {
    auto difficulty = zorplex::parse_difficulty(text.substr(colon + 1));
    if (!difficulty) return difficulty.error();
    mix.difficulty = difficulty.value();
  }
  return mix;
}

std::string task_mix_name(const TaskMix& mix) {
  std::string name = zorplex::kind_name(mix.kind);
  if (mix.kind == TaskKind::kCompositional)
    name += std::string(":") + zorplex::difficulty_name(mix.difficulty);
  return name;
}

std::string DemonstrationOptions::validate() const {
  if (mix.empty()) return "the task mix is empty (give at least one kind, e.g. compositional:easy)";
  if (tasks_per_seed < 1) return "tasks per seed must be >= 1";
  if (!(imperfect_fraction >= 0.0 && imperfect_fraction <= 1.0))
    return "the imperfect fraction must be in [0, 1]";
  return "";
}

DemonstrationStream::DemonstrationStream(DemonstrationOptions options) : options_(std::move(options)) {
  const std::string problem = options_.validate();
  if (!problem.empty()) throw std::invalid_argument("DemonstrationStream: " + problem);
}

std::int64_t DemonstrationStream::last_task_seed(std::uint64_t examples) const {
  if (examples == 0) return options_.first_task_seed - 1;
  return options_.first_task_seed + static_cast<std::int64_t>((examples - 1) / options_.tasks_per_seed);
}

Trajectory DemonstrationStream::at(std::uint64_t index) const {
  const auto per_seed = static_cast<std::uint64_t>(options_.tasks_per_seed);
  const std::uint64_t block = index / per_seed;
  const TaskMix& mix = options_.mix[block % options_.mix.size()];
  zorplex::TaskGenerator generator(mix.kind, mix.difficulty,
                                   options_.first_task_seed + static_cast<std::int64_t>(block));
  std::mt19937_64 rng(mix_seed(options_.seed, index));
  Flaw flaw = Flaw::kNone;
  if (std::uniform_real_distribution<double>(0.0, 1.0)(rng) < options_.imperfect_fraction) {
    flaw = static_cast<Flaw>(uniform(rng, 1, 4));
  }
  for (std::uint64_t skip = 0; skip < index % per_seed; ++skip) generator.next();
  // Only recursive tasks with overlong chains are skipped; 1000 misses in a
  // row would mean a kind that cannot be demonstrated at all.
  for (int tries = 0; tries < 1000; ++tries) {
    const zorplex::Task task = generator.next();
    std::optional<Demonstration> demo = demonstrate(task, generator.tools(), flaw, rng, options_.arithmetic);
    if (demo) return demonstration_trajectory(task, generator.tools(), *demo, options_.format);
  }
  throw std::runtime_error("DemonstrationStream: no demonstrable " + task_mix_name(mix) +
                           " task in 1000 tries");
}

}  // namespace rollout
