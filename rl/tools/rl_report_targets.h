// rl_report_targets.h: issue 33's accuracy targets, checked from evaluation
// files (zorplex-eval --json) of the starting policy, of RL runs and of an
// SFT-only control.
//
// Contract
// - An evaluation file's environment is its settings' kind, with the
//   difficulty for compositional tasks ("compositional:medium"); a file
//   without settings counts as the target environment.
// - Runs are grouped by mode: a run named MODE/SEED (e.g. "sync/1") is one
//   seed of MODE; a name without '/' is a mode of one seed.
// - check_targets() gives, per mode: the target environment's accuracy per
//   seed and its mean, whether the mean reaches required_accuracy, whether
//   every seed at least halved the start's error there, whether each other
//   environment's mean is no lower than the start's there, and the
//   lead over the control on the target environment when a control was
//   evaluated. all_met is true when every check of every mode holds (a
//   missing evaluation is a miss, never a pass).
// - print_targets() writes them as plain lines, each check saying "meets"
//   or "MISSES" (and "at least halved" / "NOT halved", "no lower" /
//   "LOWER").
// - Plain functions over nlohmann::json; no state, no I/O besides stdout.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace rl_report {

struct TargetOptions {
  std::string environment = "compositional:medium";  // where RL must learn
  double required_accuracy = 0.90;                     // mean over seeds, greedy
  double required_lead = 0.10;                         // over the SFT-only control
};

// env -> evaluation JSON
using EvalsByEnvironment = std::map<std::string, nlohmann::json>;

std::string environment_of(const nlohmann::json& eval, const std::string& fallback);
std::string mode_of(const std::string& run_name);

nlohmann::json check_targets(const EvalsByEnvironment& before,
                             const std::map<std::string, EvalsByEnvironment>& runs,
                             const EvalsByEnvironment& control, const TargetOptions& options);

void print_targets(const nlohmann::json& targets);

}  // namespace rl_report
