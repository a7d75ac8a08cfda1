// algorithms/step_credit.h: credit from the first wrong arithmetic step.
//
// A Zorplex answer is worked out in steps the environment can check on its
// own: every claim "7*6+4=46", "12-5-1=6", "282 + 1410 = 1692" written by
// the model is an expression of integers and + - * with an integer result.
// With outcome rewards alone, a wrong answer pushes down every token of its
// trajectory, the correct steps before the mistake as much as the mistake
// (and a lucky right answer pushes up a wrong step). Step credit uses the
// checkable steps to say where a trajectory went wrong: a process signal
// from a rule-based verifier, no learned reward model.
//
// Contract
// - first_arithmetic_error(t): the index into t.tokens of the first token
//   the model generated that made a checkable claim wrong: in the first
//   claim (in text order) whose written result differs from its
//   expression's value, the first result character that differs (or, when
//   the written result is a strict prefix of the right one, the token after
//   it). Only text after the prompt is read; a claim whose result the model
//   did not generate (injected tool results never hold one) is skipped.
//   std::nullopt: no wrong checkable claim. Expressions use the usual
//   precedence (* before + and -, left to right) on 64-bit integers; a
//   number or result of more than 18 digits is not checked.
// - credited_tokens(t, advantage): the half-open token range [begin, end)
//   whose generated tokens keep the advantage: with a first error at k, a
//   negative advantage applies from k on (the steps before it were right)
//   and a positive one before k only (a wrong step is never reinforced);
//   without one, or with advantage 0, the whole trajectory.
// - Pure functions; any thread; nothing fails.
#pragma once

#include <cstddef>
#include <optional>
#include <utility>

#include "rollout/trajectory.h"

namespace algorithms {

std::optional<std::size_t> first_arithmetic_error(const rollout::Trajectory& trajectory);

std::pair<std::size_t, std::size_t> credited_tokens(const rollout::Trajectory& trajectory, double advantage);

}  // namespace algorithms
