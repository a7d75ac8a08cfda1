// zorplex/tasks.h: Zorplex tasks and the seeded generator that makes them.
//
// Contract
// - TaskGenerator(kind, difficulty, seed) reproduces the original's
//   get_spec(kind, seed=seed[, difficulty=...]): it owns two independent
//   PythonRandom(seed) generators, one consumed by the value table, one by
//   the tasks. For the recursive kind the constructor runs the redirect
//   set-up on the task generator first (redirect_map.h), so the recursive task
//   stream differs from the others. next() then gives task after task: the
//   i-th call returns the same task as the original's i-th generate_task().
// - difficulty only changes compositional tasks (easy: 2 words, "+"; medium:
//   2 words, one of + - *; hard: 3 words, one operator used twice, evaluated
//   left to right). It is recorded in every task but ignored by other kinds.
// - The generator owns its state. next() mutates it: not thread-safe (use one
//   generator per thread). tools() and table() are immutable and may be used
//   from any thread while no one moves or destroys the generator.
// - Nothing here fails: every kind/difficulty/seed combination is valid.
//   Names are parsed (with errors) in kinds.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zorplex/kinds.h"
#include "zorplex/python_random.h"
#include "zorplex/tools.h"

namespace zorplex {

struct Task {
  TaskKind kind = TaskKind::kSimple;
  Difficulty difficulty = Difficulty::kEasy;
  std::string question;
  // Empty only for a recursive task whose chain does not reach a value in
  // kMaxResolveSteps lookups (never seen for seeds 0..19999, where the
  // longest chain is 8). Such a task cannot be answered correctly.
  std::optional<std::int64_t> answer;
  // compositional: the 2 or 3 operands in question order; other kinds: the
  // one word asked about.
  std::vector<std::string> words;
  // compositional: '+', '-' or '*'; 0 for other kinds.
  char op = 0;
  // multi_step: the word's key (keys.h); empty otherwise.
  std::string key;
  // recursive: the word, each redirect target, and the terminal; empty otherwise.
  std::vector<std::string> chain;
};

class TaskGenerator {
 public:
  TaskGenerator(TaskKind kind, Difficulty difficulty, std::int64_t seed);

  // The next task (mutates the task generator).
  Task next();

  TaskKind kind() const { return kind_; }
  Difficulty difficulty() const { return difficulty_; }
  std::int64_t seed() const { return seed_; }
  const ValueTable& table() const { return table_; }
  // The tools for this kind and seed (for recursive, with this generator's
  // redirects; they do not change as tasks are drawn).
  const Toolbox& tools() const { return tools_; }

 private:
  Task next_simple();
  Task next_compositional();
  Task next_recursive();

  TaskKind kind_;
  Difficulty difficulty_;
  std::int64_t seed_;
  PythonRandom table_rng_;  // consumed by the table; kept, as in the original
  PythonRandom task_rng_;
  ValueTable table_;
  std::optional<RedirectMap> redirects_;
  Toolbox tools_;
};

}  // namespace zorplex
