// rollout/demonstrations.h: supervised demonstrations of the Zorplex tool
// protocol, synthesized from the environment, and the seeded stream of them
// that SFT trains on.
//
// Contract
// - demonstrate(task, tools, flaw, rng) writes the turns a competent policy
//   would produce, running the real tools for every value it uses:
//     compositional: LOOKUP[w] for each operand, one turn each, then the
//       arithmetic written out left to right ("8 * 7 = 56, 56 * 3 = 168.")
//       and "[ANSWER] <n>". With Arithmetic::kColumns (the default) each
//       addition of non-negative numbers first shows its column sums from
//       the ones up, each with the carry in:
//       "30 + 95: 0+5+0=5, 3+9+0=12. 30 + 95 = 125. [ANSWER] 125"
//       (a small byte-level model learns one-digit sums with a carry far
//       more easily than whole sums written most significant digit first;
//       docs/rollouts_and_sft.md). kPaddedColumns: the same with both
//       operands written as wide as the wider one ("002 + 100: 2+0+0=2,
//       0+0+0=0, 0+1+0=1. 2 + 100 = 102."). Subtractions and
//       multiplications of non-negative numbers get columns too:
//       "72 - 35: 12-5-0=7, 7-3-1=3. 72 - 35 = 37." (each column's top
//       digit with the 10 it borrows, minus the bottom digit, minus the
//       borrow in; a smaller minuend subtracts the other way round, negated:
//       "35 - 72 = -(72 - 35). 72 - 35: ... 35 - 72 = -37."), and
//       "47 * 36: 47*6: 7*6+0=42, 4*6+4=28; 47*3: 7*3+0=21, 4*3+2=14;
//       282 + 1410: 2+0+0=2, ... 47 * 36 = 1692." (one partial product per
//       digit of a multiplier below 100, then their sum in columns).
//       kPlain: "30 + 95 = 125. [ANSWER] 125";
//     simple / recursive: LOOKUP[word], following every "SEE: x" with
//       LOOKUP[x], then "[ANSWER] <n>";
//     multi_step: GETKEY[word], FETCH[key], then "[ANSWER] <n>".
//   The last turn ends with EOS. A flaw makes it imperfect on purpose:
//     kWrongAnswer  the final number is off by 1..9 (compositional: the
//                   last arithmetic step is wrong);
//     kNoAnswerTag  the final turn gives the number without "[ANSWER]";
//     kExtraCall    one lookup is repeated (one more tool call);
//     kGuess        the last lookup is skipped and its value guessed (1..100).
//   A recursive task whose chain needs more than kMaxTurns - 1 lookups, or
//   has no answer, yields no demonstration (std::nullopt).
// - DemonstrationStream is random access and deterministic: example i is a
//   function of (options, i) only, so a resumed run sees the same data.
//   Example i uses the task seed first_task_seed + i / tasks_per_seed, the
//   mix entry (i / tasks_per_seed) % mix.size(), the (i % tasks_per_seed)-th
//   task of that generator, and a flaw with probability imperfect_fraction
//   (uniform over the four) drawn from a generator seeded by (seed, i).
//   Seeds are disjoint from evaluation only if the user keeps them so:
//   last_task_seed(n) says which task seeds n examples touch.
// - Thread: const methods may be called concurrently. Errors: construction
//   with an empty mix, tasks_per_seed < 1 or imperfect_fraction outside
//   [0, 1] throws std::invalid_argument (validate options first with
//   DemonstrationOptions::validate()).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "policy/tokenizer.h"
#include "rollout/trajectory.h"
#include "zorplex/tasks.h"

namespace rollout {

enum class Flaw { kNone, kWrongAnswer, kNoAnswerTag, kExtraCall, kGuess };
const char* flaw_name(Flaw flaw);

enum class Arithmetic { kColumns, kPlain, kPaddedColumns };
const char* arithmetic_name(Arithmetic arithmetic);  // "columns", "plain", "padded"
zorplex::Result<Arithmetic> parse_arithmetic(const std::string& name);

struct Demonstration {
  std::vector<std::string> turns;  // model text per turn; the last one is followed by EOS
  Flaw flaw = Flaw::kNone;
};

std::optional<Demonstration> demonstrate(const zorplex::Task& task, const zorplex::Toolbox& tools, Flaw flaw,
                                         std::mt19937_64& rng, Arithmetic arithmetic = Arithmetic::kColumns);

// The columns of the task's column working (a flawless Arithmetic::kColumns
// demonstration) that take a carry or a borrow in: "95 + 95: 5+5+0=10,
// 9+9+1=19." has 1, "47 * 36: 47*6: 7*6+0=42, 4*6+4=28; ..." counts every
// partial product's column and the final sum's. 0 for a task without columns
// (other kinds, negative operands, a lookup that fails).
int carries_in(const zorplex::Task& task, const zorplex::Toolbox& tools);

// The demonstration as a trajectory: the turns fed through a TrajectoryBuilder
// (so injections and masks are exactly those of a rollout), log-probs 0.
Trajectory demonstration_trajectory(const zorplex::Task& task, const zorplex::Toolbox& tools,
                                    const Demonstration& demo, const policy::PromptFormat& format);

struct TaskMix {
  zorplex::TaskKind kind = zorplex::TaskKind::kCompositional;
  zorplex::Difficulty difficulty = zorplex::Difficulty::kEasy;
};
// "compositional:easy", "simple", ... -> TaskMix.
zorplex::Result<TaskMix> parse_task_mix(const std::string& text);
std::string task_mix_name(const TaskMix& mix);

struct DemonstrationOptions {
  std::vector<TaskMix> mix{TaskMix{}};
  std::int64_t first_task_seed = 100000;
  int tasks_per_seed = 4;
  double imperfect_fraction = 0.2;
  std::uint64_t seed = 0;  // flaws and guesses
  Arithmetic arithmetic = Arithmetic::kColumns;
  policy::PromptFormat format;

  // "" when usable, else what is wrong.
  std::string validate() const;
};

class DemonstrationStream {
 public:
  explicit DemonstrationStream(DemonstrationOptions options);

  // Example index (skipping tasks that cannot be demonstrated: the next
  // task of the same generator is used instead).
  Trajectory at(std::uint64_t index) const;
  std::int64_t last_task_seed(std::uint64_t examples) const;
  const DemonstrationOptions& options() const { return options_; }

 private:
  DemonstrationOptions options_;
};

}  // namespace rollout
