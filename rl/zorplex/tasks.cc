#include "zorplex/tasks.h"

#include <utility>

namespace zorplex {
namespace {

std::string lookup_question(const std::string& word) {
  return "What is the zorplex value of '" + word + "'?";
}

std::int64_t apply(char op, std::int64_t a, std::int64_t b) {
  switch (op) {
    case '-': return a - b;
    case '*': return a * b;
    default: return a + b;
  }
}

// Runs the recursive set-up on rng when kind is recursive (before any task).
std::optional<RedirectMap> make_redirects(TaskKind kind, const ValueTable& table, PythonRandom& rng) {
  if (kind != TaskKind::kRecursive) return std::nullopt;
  return RedirectMap::build(table, rng);
}

}  // namespace

TaskGenerator::TaskGenerator(TaskKind kind, Difficulty difficulty, std::int64_t seed)
    : kind_(kind),
      difficulty_(difficulty),
      seed_(seed),
      table_rng_(seed),
      task_rng_(seed),
      table_(ValueTable::draw(seed, table_rng_)),
      redirects_(make_redirects(kind, table_, task_rng_)),
      tools_(kind, table_, redirects_) {}

Task TaskGenerator::next() {
  switch (kind_) {
    case TaskKind::kCompositional: return next_compositional();
    case TaskKind::kRecursive: return next_recursive();
    case TaskKind::kSimple:
    case TaskKind::kMultiStep: break;
  }
  return next_simple();
}

Task TaskGenerator::next_simple() {
  const std::size_t i = task_rng_.choice_index(words().size());
  Task task;
  task.kind = kind_;
  task.difficulty = difficulty_;
  task.words = {words()[i]};
  task.question = lookup_question(words()[i]);
  task.answer = table().value_at(i);
  if (kind_ == TaskKind::kMultiStep) task.key = tools_.key_at(i);
  return task;
}

Task TaskGenerator::next_compositional() {
  static const std::vector<char> kEasyOps = {'+'};
  static const std::vector<char> kAllOps = {'+', '-', '*'};
  const std::size_t count = difficulty_ == Difficulty::kHard ? 3 : 2;
  const std::vector<char>& ops = difficulty_ == Difficulty::kEasy ? kEasyOps : kAllOps;

  Task task;
  task.kind = kind_;
  task.difficulty = difficulty_;
  std::vector<std::int64_t> values;
  for (std::size_t i : task_rng_.sample_indices(words().size(), count)) {
    task.words.push_back(words()[i]);
    values.push_back(table().value_at(i));
  }
  task.op = task_rng_.choice(ops);

  std::int64_t answer = apply(task.op, values[0], values[1]);
  std::string question =
      "What is zorplex('" + task.words[0] + "') " + task.op + " zorplex('" + task.words[1] + "')";
  for (std::size_t i = 2; i < count; ++i) {
    answer = apply(task.op, answer, values[i]);
    question += std::string(" ") + task.op + " zorplex('" + task.words[i] + "')";
  }
  task.question = question + "?";
  task.answer = answer;
  return task;
}

Task TaskGenerator::next_recursive() {
  std::vector<std::string> candidates = redirects_->redirect_words();
  // The original falls back to any word if nothing redirects (cannot happen
  // with 13 redirectors, kept for draw-for-draw fidelity).
  const std::string word = candidates.empty() ? task_rng_.choice(words()) : task_rng_.choice(candidates);
  RedirectMap::Resolution resolution = redirects_->resolve(word);
  Task task;
  task.kind = kind_;
  task.difficulty = difficulty_;
  task.words = {word};
  task.question = lookup_question(word);
  if (resolution.value) task.answer = *resolution.value;
  task.chain = std::move(resolution.chain);
  return task;
}

}  // namespace zorplex
