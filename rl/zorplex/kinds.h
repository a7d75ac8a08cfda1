// zorplex/kinds.h: the four task kinds and the three compositional
// difficulties, with their names.
//
// Contract
// - Names are the spec's: simple, compositional, multi_step, recursive;
//   easy, medium, hard. parse_*() accepts exactly those (case-sensitive) and
//   otherwise returns an Error naming the bad input and every valid value.
// - Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "zorplex/result.h"

namespace zorplex {

enum class TaskKind { kSimple, kCompositional, kMultiStep, kRecursive };

// Only compositional tasks depend on it; the other kinds ignore it.
enum class Difficulty { kEasy, kMedium, kHard };

const char* kind_name(TaskKind kind);
const char* difficulty_name(Difficulty difficulty);

// "simple, compositional, multi_step, recursive" and "easy, medium, hard".
std::string valid_kind_names();
std::string valid_difficulty_names();

Result<TaskKind> parse_kind(std::string_view name);
Result<Difficulty> parse_difficulty(std::string_view name);

}  // namespace zorplex
