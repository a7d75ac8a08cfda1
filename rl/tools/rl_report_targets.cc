// rl_report_targets.cc: see rl_report_targets.h.
#include "rl_report_targets.h"

#include <cstdio>
#include <string>
#include <vector>

namespace rl_report {
namespace {

using json = nlohmann::json;

constexpr double kSlack = 1e-9;  // accuracies are counts over tasks: compare with a hair of rounding room

double accuracy(const json& eval) { return eval.value("accuracy", 0.0); }

const char* verdict(bool met) { return met ? "meets" : "MISSES"; }

std::string short_name(const std::string& environment) {
  const auto colon = environment.find(':');
  return colon == std::string::npos ? environment : environment.substr(colon + 1);
}

// One mode's seeds: mode -> (seed name -> evaluations), in name order.
std::map<std::string, std::map<std::string, const EvalsByEnvironment*>> by_mode(
    const std::map<std::string, EvalsByEnvironment>& runs) {
  std::map<std::string, std::map<std::string, const EvalsByEnvironment*>> modes;
  for (const auto& [name, evals] : runs) modes[mode_of(name)][name] = &evals;
  return modes;
}

json check_mode(const EvalsByEnvironment& before, const std::map<std::string, const EvalsByEnvironment*>& seeds,
                const EvalsByEnvironment& control, const TargetOptions& options) {
  const std::string& target = options.environment;
  json mode = {{"seeds", seeds.size()}};
  bool met = true;

  // The target environment: the mean, and the error halved in every seed.
  const auto start = before.find(target);
  std::vector<double> accuracies;
  bool every_seed_halved = start != before.end();
  json per_seed = json::array();
  for (const auto& [name, evals] : seeds) {
    const auto it = evals->find(target);
    if (it == evals->end()) {
      every_seed_halved = false;
      per_seed.push_back({{"run", name}, {"accuracy", nullptr}});
      continue;
    }
    const double after = accuracy(it->second);
    accuracies.push_back(after);
    const bool halved = start != before.end() && 1.0 - after <= (1.0 - accuracy(start->second)) / 2 + kSlack;
    every_seed_halved = every_seed_halved && halved;
    per_seed.push_back({{"run", name}, {"accuracy", after}, {"error", 1.0 - after}, {"error_halved", halved}});
  }
  const bool complete = !accuracies.empty() && accuracies.size() == seeds.size();
  double mean = 0.0;
  for (double a : accuracies) mean += a;
  if (!accuracies.empty()) mean /= static_cast<double>(accuracies.size());
  mode["per_seed"] = per_seed;
  mode["accuracy_mean"] = complete ? json(mean) : json(nullptr);
  mode["meets_accuracy"] = complete && mean >= options.required_accuracy - kSlack;
  mode["error_before"] = start != before.end() ? json(1.0 - accuracy(start->second)) : json(nullptr);
  mode["error_halved_every_seed"] = complete && every_seed_halved;
  met = met && mode["meets_accuracy"].get<bool>() && mode["error_halved_every_seed"].get<bool>();

  // Every other environment evaluated before RL: no lower after it.
  json others = json::object();
  for (const auto& [environment, start_eval] : before) {
    if (environment == target) continue;
    double sum = 0.0;
    std::size_t n = 0;
    for (const auto& [name, evals] : seeds) {
      const auto it = evals->find(environment);
      if (it != evals->end()) {
        sum += accuracy(it->second);
        ++n;
      }
    }
    const bool all_seeds = n == seeds.size() && n > 0;
    const double after_mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
    const bool no_lower = all_seeds && after_mean >= accuracy(start_eval) - kSlack;
    others[environment] = {{"before", accuracy(start_eval)},
                           {"after_mean", all_seeds ? json(after_mean) : json(nullptr)},
                           {"no_lower", no_lower}};
    met = met && no_lower;
  }
  mode["other_environments"] = others;

  // The SFT-only control, when there is one.
  const auto control_eval = control.find(target);
  if (control_eval != control.end()) {
    const double lead = mean - accuracy(control_eval->second);
    mode["lead_over_control"] = complete ? json(lead) : json(nullptr);
    mode["meets_lead"] = complete && lead >= options.required_lead - kSlack;
    met = met && mode["meets_lead"].get<bool>();
  }
  mode["all_met"] = met;
  return mode;
}

std::string percent_list(const json& per_seed) {
  std::string text;
  for (const json& seed : per_seed) {
    char buf[32];
    if (seed["accuracy"].is_null()) {
      std::snprintf(buf, sizeof buf, "%s", "none");
    } else {
      std::snprintf(buf, sizeof buf, "%.1f", 100 * seed["accuracy"].get<double>());
    }
    text += (text.empty() ? "" : " ") + std::string(buf);
  }
  return text;
}

}  // namespace

std::string environment_of(const json& eval, const std::string& fallback) {
  const json settings = eval.value("settings", json::object());
  const std::string kind = settings.value("kind", "");
  if (kind.empty()) return fallback;
  return kind == "compositional" ? kind + ":" + settings.value("difficulty", "easy") : kind;
}

std::string mode_of(const std::string& run_name) { return run_name.substr(0, run_name.find('/')); }

json check_targets(const EvalsByEnvironment& before, const std::map<std::string, EvalsByEnvironment>& runs,
                   const EvalsByEnvironment& control, const TargetOptions& options) {
  json targets = {{"environment", options.environment},
                  {"required_accuracy", options.required_accuracy},
                  {"required_lead", options.required_lead}};
  const auto control_eval = control.find(options.environment);
  targets["control_accuracy"] = control_eval != control.end() ? json(accuracy(control_eval->second)) : json(nullptr);
  const auto start = before.find(options.environment);
  targets["accuracy_before"] = start != before.end() ? json(accuracy(start->second)) : json(nullptr);
  json modes = json::object();
  bool all_met = !runs.empty();
  for (const auto& [mode, seeds] : by_mode(runs)) {
    modes[mode] = check_mode(before, seeds, control, options);
    all_met = all_met && modes[mode]["all_met"].get<bool>();
  }
  targets["modes"] = modes;
  targets["all_met"] = all_met;
  return targets;
}

void print_targets(const json& targets) {
  const std::string target = targets.value("environment", "");
  const double required = targets.value("required_accuracy", 0.0);
  std::printf("targets on %s (greedy, held-out; means over seeds):\n", target.c_str());
  if (targets["accuracy_before"].is_number()) {
    std::printf("  start  %.1f%% %s", 100 * targets["accuracy_before"].get<double>(), short_name(target).c_str());
    if (targets["control_accuracy"].is_number()) {
      std::printf(", SFT-only control %.1f%%", 100 * targets["control_accuracy"].get<double>());
    }
    std::printf("\n");
  }
  for (const auto& [name, mode] : targets["modes"].items()) {
    const json& per_seed = mode["per_seed"];
    const std::string seeds = percent_list(per_seed);
    if (mode["accuracy_mean"].is_null()) {
      std::printf("  %-6s %s: MISSES the required %.0f%%: no evaluation of every seed (%s)\n", name.c_str(),
                  short_name(target).c_str(), 100 * required, seeds.c_str());
    } else {
      std::printf("  %-6s %s %.1f%% (%zu seed%s: %s): %s the required %.0f%%\n", name.c_str(),
                  short_name(target).c_str(), 100 * mode["accuracy_mean"].get<double>(), per_seed.size(),
                  per_seed.size() == 1 ? "" : "s", seeds.c_str(), verdict(mode["meets_accuracy"].get<bool>()),
                  100 * required);
    }
    if (mode["error_before"].is_number()) {
      std::printf("  %-6s %s error %.1f%% -> %s: %s in every seed\n", name.c_str(), short_name(target).c_str(),
                  100 * mode["error_before"].get<double>(), [&] {
                    std::string errors;
                    for (const json& seed : per_seed) {
                      char buf[32];
                      if (seed["accuracy"].is_null()) {
                        std::snprintf(buf, sizeof buf, "none");
                      } else {
                        std::snprintf(buf, sizeof buf, "%.1f%%", 100 * seed["error"].get<double>());
                      }
                      errors += (errors.empty() ? "" : " ") + std::string(buf);
                    }
                    return errors;
                  }().c_str(),
                  mode["error_halved_every_seed"].get<bool>() ? "at least halved" : "NOT halved");
    }
    for (const auto& [environment, check] : mode["other_environments"].items()) {
      if (check["after_mean"].is_null()) {
        std::printf("  %-6s %s: MISSES: no evaluation of every seed (start %.1f%%)\n", name.c_str(),
                    short_name(environment).c_str(), 100 * check.value("before", 0.0));
      } else {
        std::printf("  %-6s %s %.1f%% against %.1f%% at the start: %s\n", name.c_str(),
                    short_name(environment).c_str(), 100 * check["after_mean"].get<double>(),
                    100 * check.value("before", 0.0), check["no_lower"].get<bool>() ? "no lower" : "LOWER");
      }
    }
    if (mode.contains("lead_over_control")) {
      if (mode["lead_over_control"].is_null()) {
        std::printf("  %-6s lead over the SFT-only control: MISSES: no evaluation of every seed\n", name.c_str());
      } else {
        std::printf("  %-6s %+.1f points over the SFT-only control on %s: %s the required %+.0f\n", name.c_str(),
                    100 * mode["lead_over_control"].get<double>(), short_name(target).c_str(),
                    verdict(mode["meets_lead"].get<bool>()), 100 * targets.value("required_lead", 0.0));
      }
    }
  }
  std::printf("targets: %s\n", targets.value("all_met", false) ? "all met" : "NOT all met");
}

}  // namespace rl_report
