#include "zorplex/kinds.h"

namespace zorplex {
namespace {

constexpr TaskKind kKinds[] = {TaskKind::kSimple, TaskKind::kCompositional, TaskKind::kMultiStep,
                               TaskKind::kRecursive};
constexpr Difficulty kDifficulties[] = {Difficulty::kEasy, Difficulty::kMedium, Difficulty::kHard};

}  // namespace

const char* kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::kSimple: return "simple";
    case TaskKind::kCompositional: return "compositional";
    case TaskKind::kMultiStep: return "multi_step";
    case TaskKind::kRecursive: return "recursive";
  }
  return "?";
}

const char* difficulty_name(Difficulty difficulty) {
  switch (difficulty) {
    case Difficulty::kEasy: return "easy";
    case Difficulty::kMedium: return "medium";
    case Difficulty::kHard: return "hard";
  }
  return "?";
}

std::string valid_kind_names() {
  std::string out;
  for (TaskKind kind : kKinds) {
    if (!out.empty()) out += ", ";
    out += kind_name(kind);
  }
  return out;
}

std::string valid_difficulty_names() {
  std::string out;
  for (Difficulty difficulty : kDifficulties) {
    if (!out.empty()) out += ", ";
    out += difficulty_name(difficulty);
  }
  return out;
}

Result<TaskKind> parse_kind(std::string_view name) {
  for (TaskKind kind : kKinds) {
    if (name == kind_name(kind)) return kind;
  }
  return Error{"unknown task kind '" + std::string(name) + "': expected one of " + valid_kind_names()};
}

Result<Difficulty> parse_difficulty(std::string_view name) {
  for (Difficulty difficulty : kDifficulties) {
    if (name == difficulty_name(difficulty)) return difficulty;
  }
  return Error{"unknown difficulty '" + std::string(name) + "': expected one of " + valid_difficulty_names()};
}

}  // namespace zorplex
