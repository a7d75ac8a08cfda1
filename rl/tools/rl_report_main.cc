// rl-report: turns the files of RL runs into the demo's report.json and the
// data files its plots are drawn from.
//
//   rl-report --before EVAL.json --run sync=DIR --eval sync=EVAL.json
//             --run async=DIR --eval async=EVAL.json --out report.json [--plots DIR]
//   rl-report --before EASY.json --before MEDIUM.json --run sync/1=DIR
//             --eval sync/1=EASY.json --eval sync/1=MEDIUM.json ...
//             --control CONTROL-MEDIUM.json --out report.json
//             several environments (each evaluation file says its own),
//             seeds of a mode (MODE/SEED), and the SFT-only control: the
//             "targets" object checks issue 33's figures (rl_report_targets.h)
//   rl-report --summarize report.json        print it as a table
//   rl-report --run off=DIR --run on=DIR --out report.json   runs only: no
//             evaluations, no accuracy figures (any run names)
//
// A run folder holds what scripts/rl-run.sh writes: trainer.jsonl (publish
// and step events), generator-K.jsonl (pull and round events) and
// timeline-*.jsonl. Torn last lines (a killed process) are skipped.
// report.json: eval {n, kind, seed, before, after_<run>...}, one object per
// run (wall_s, steps, trajectories, rates, staleness, drops, step and pull
// times, digests checked), weight_sync (transport, bytes_per_pull, pulls,
// median_s, share_of_step), figures (on the target environment: accuracy
// gains, the accuracy required after RL, the error rate before and after and
// whether RL halved it) and targets (rl_report_targets.h). Each run also has
// its totals of trajectories sampled, filtered at the source and trained on,
// and with --plots its generators' correct rate round by round
// (gencurve-NAME.dat: every trajectory they sampled, before any filter,
// unlike the trainer's step figures, which see only what it trains on).
// Exit codes: 0 written, 1 unreadable input, 2 bad usage.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rl_report_targets.h"

namespace {

using json = nlohmann::json;

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json record = json::parse(line, nullptr, false);
    if (!record.is_discarded() && record.is_object()) records.push_back(std::move(record));
  }
  return records;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Nearest rank: the smallest value with at least q of the values at or below it.
double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank > 0 ? rank - 1 : 0)];
}

json eval_entry(const json& eval) {
  return {{"accuracy", eval.value("accuracy", 0.0)},
          {"format_rate", eval.value("format_rate", 0.0)},
          {"avg_turns", eval.value("avg_turns", 0.0)},
          {"avg_tool_calls", eval.value("avg_tool_calls", 0.0)},
          {"failure_modes", eval.value("failure_modes", json::object())},
          {"correct", eval.value("correct", 0)},
          {"tasks", eval.value("tasks", 0)}};
}

struct RunFiles {
  std::vector<json> trainer;
  std::map<std::string, std::vector<json>> generators;  // "generator-K" -> records
  std::vector<json> timeline;
};

RunFiles read_run(const std::string& dir) {
  RunFiles run;
  run.trainer = read_jsonl(dir + "/trainer.jsonl");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("generator-", 0) == 0 && entry.path().extension() == ".jsonl") {
      run.generators[entry.path().stem().string()] = read_jsonl(entry.path().string());
    } else if (name.rfind("timeline-", 0) == 0 && entry.path().extension() == ".jsonl") {
      for (json& event : read_jsonl(entry.path().string())) run.timeline.push_back(std::move(event));
    }
  }
  return run;
}

// Summarises one run; also fills the plot data.
json summarize_run(const std::string& name, const RunFiles& run, json& weight_sync,
                   std::vector<double>& all_pull_seconds, const std::string& plots) {
  std::map<std::uint64_t, std::string> published;  // version -> digest
  double first_publish = -1.0;
  double last_step = 0.0;
  std::vector<double> step_seconds;
  std::vector<double> train_seconds;
  std::uint64_t trajectories = 0;
  // Every step's sampled, filtered-at-the-source and trained-on trajectories
  // (issue 33: the over-sampling of both modes, in one line).
  std::uint64_t sampled_total = 0;
  std::uint64_t filtered_total = 0;
  std::uint64_t trained_total = 0;
  struct EnvironmentTotals {
    std::uint64_t arrived = 0, arrived_tokens = 0, used = 0, used_tokens = 0, spilled_tokens = 0;
    double correct = 0.0, reward = 0.0, truncated = 0.0;  // sums over the arrived rollouts
  };
  std::map<std::string, EnvironmentTotals> environments;
  double staleness_weighted = 0.0;
  std::uint64_t staleness_max = 0;
  json dropped = json::object();
  int steps = 0;
  std::ofstream curve;
  if (!plots.empty()) curve.open(plots + "/curve-" + name + ".dat");
  if (curve) curve << "# step wall_s reward_mean correct_rate staleness_mean reward_avg5 correct_avg5\n";
  std::vector<double> rewards;
  std::vector<double> corrects;
  json periodic_eval = json::array();  // the trainer's greedy held-out evaluations (--eval-every)
  // One curve file per difficulty: evalcurve-NAME.dat (easy) and evalcurve-NAME-DIFFICULTY.dat.
  std::map<std::string, std::ofstream> eval_curves;
  const auto eval_curve_for = [&](const std::string& difficulty) -> std::ofstream* {
    if (plots.empty()) return nullptr;
    auto [it, inserted] = eval_curves.try_emplace(difficulty);
    if (inserted) {
      it->second.open(plots + "/evalcurve-" + name + (difficulty == "easy" ? "" : "-" + difficulty) + ".dat");
      it->second << "# step wall_s accuracy tasks\n";
    }
    return &it->second;
  };
  if (!plots.empty()) {
    eval_curve_for("easy");  // both files always, for the plot script: empty when not evaluated
    eval_curve_for("medium");
  }
  const auto last5 = [](const std::vector<double>& v) {
    const std::size_t n = std::min<std::size_t>(5, v.size());
    double sum = 0.0;
    for (std::size_t i = v.size() - n; i < v.size(); ++i) sum += v[i];
    return n > 0 ? sum / static_cast<double>(n) : 0.0;
  };
  for (const json& r : run.trainer) {
    const std::string event = r.value("event", "");
    if (event == "publish") {
      published[r.value("version", std::uint64_t{0})] = r.value("xxh3", "");
      if (first_publish < 0) first_publish = r.value("time", 0.0);
    } else if (event == "eval") {
      const double at = r.value("time", 0.0) - first_publish;
      const std::string difficulty = r.value("difficulty", "easy");
      periodic_eval.push_back({{"step", r.value("step", 0)},
                               {"version", r.value("version", std::uint64_t{0})},
                               {"difficulty", difficulty},
                               {"wall_s", at},
                               {"tasks", r.value("tasks", 0)},
                               {"accuracy", r.value("accuracy", 0.0)}});
      if (std::ofstream* eval_curve = eval_curve_for(difficulty)) {
        *eval_curve << r.value("step", 0) << ' ' << at << ' ' << r.value("accuracy", 0.0) << ' '
                    << r.value("tasks", 0) << '\n';
      }
    } else if (event == "step") {
      ++steps;
      last_step = r.value("time", 0.0);
      step_seconds.push_back(r.value("step_seconds", 0.0));
      train_seconds.push_back(r.value("train_seconds", 0.0));
      const std::uint64_t n = r.value("trajectories", std::uint64_t{0});
      trajectories += n;
      sampled_total += r.value("trajectories_sampled", n);
      filtered_total += r.value("trajectories_filtered", std::uint64_t{0});
      trained_total += r.value("trajectories_trained", n);
      staleness_weighted += r.value("staleness_mean", 0.0) * static_cast<double>(n);
      staleness_max = std::max(staleness_max, r.value("staleness_max", std::uint64_t{0}));
      dropped = r.value("dropped", json::object());
      // Marin's metrics per environment (the trainer's per-environment
      // buffers): what arrived since the last step and what this step used.
      const json step_environments = r.value("environments", json::object());
      for (const auto& [environment, m] : step_environments.items()) {
        EnvironmentTotals& totals = environments[environment];
        const auto arrived = static_cast<double>(m.value("new_rollouts", std::uint64_t{0}));
        totals.arrived += m.value("new_rollouts", std::uint64_t{0});
        totals.arrived_tokens += m.value("new_tokens", std::uint64_t{0});
        totals.correct += m.value("correct_rate", 0.0) * arrived;
        totals.reward += m.value("reward_mean", 0.0) * arrived;
        totals.truncated += m.value("frac_truncated", 0.0) * arrived;
        totals.used += m.value("rollouts_used", std::uint64_t{0});
        totals.used_tokens += m.value("tokens_used", std::uint64_t{0});
        totals.spilled_tokens += m.value("spilled_tokens", std::uint64_t{0});
      }
      // Every sampled trajectory of the step, before the zero-variance filter
      // (which pulls the trained-on share towards 0.5, and to nothing when a
      // step has no usable group); runs from before issue 19 lack these.
      rewards.push_back(r.value("reward_mean_before_filter", r.value("reward_mean", 0.0)));
      corrects.push_back(r.value("correct_rate_before_filter", r.value("correct_rate", 0.0)));
      if (curve) {
        curve << r.value("step", 0) << ' ' << (last_step - first_publish) << ' ' << rewards.back() << ' '
              << corrects.back() << ' ' << r.value("staleness_mean", 0.0) << ' ' << last5(rewards) << ' '
              << last5(corrects) << '\n';
      }
    }
  }
  const double wall = steps > 0 ? last_step - first_publish : 0.0;

  std::uint64_t generated = 0;
  std::uint64_t tokens = 0;
  std::uint64_t pulls = 0;
  std::uint64_t digests_checked = 0;
  std::uint64_t digests_matched = 0;
  std::vector<double> pull_seconds;
  // Generation blocked per update: a foreground pull's whole time, or an
  // in-flight install's pause.
  std::vector<double> blocked_seconds;
  bool in_flight = false;
  // Rounds during which a new version was installed: generation ran through it.
  std::uint64_t rounds = 0;
  std::uint64_t rounds_through_update = 0;
  struct Round {
    double time;
    std::uint64_t version;
    std::uint64_t trajectories;
    double correct_rate;
  };
  std::vector<Round> round_curve;
  for (const auto& [generator, records] : run.generators) {
    for (const json& r : records) {
      const std::string event = r.value("event", "");
      if (event == "round") {
        round_curve.push_back({r.value("time", 0.0) - first_publish, r.value("version", std::uint64_t{0}),
                               r.value("trajectories", std::uint64_t{0}), r.value("correct_rate", 0.0)});
        generated += r.value("trajectories", std::uint64_t{0});
        tokens += r.value("tokens", std::uint64_t{0});
        ++rounds;
        if (r.value("version_after", std::uint64_t{0}) > r.value("version", std::uint64_t{0})) {
          ++rounds_through_update;
        }
      } else if (event == "install") {
        in_flight = true;
        blocked_seconds.push_back(r.value("blocked_seconds", 0.0));
      } else if (event == "pull") {
        if (!r.value("background", false)) blocked_seconds.push_back(r.value("seconds", 0.0));
        ++pulls;
        pull_seconds.push_back(r.value("seconds", 0.0));
        all_pull_seconds.push_back(r.value("seconds", 0.0));
        weight_sync["transport"] = r.value("transport", "");
        weight_sync["bytes_per_pull"] = r.value("bytes", std::uint64_t{0});
        auto it = published.find(r.value("version", std::uint64_t{0}));
        if (it != published.end()) {
          ++digests_checked;
          digests_matched += it->second == r.value("xxh3", "") ? 1 : 0;
        }
      }
    }
  }

  if (!plots.empty()) {
    // The generators' rounds in time order, each with the running mean over
    // the last 8 rounds' trajectories (every sampled one, before any filter).
    std::sort(round_curve.begin(), round_curve.end(), [](const Round& a, const Round& b) { return a.time < b.time; });
    std::ofstream gencurve(plots + "/gencurve-" + name + ".dat");
    gencurve << "# wall_s version trajectories correct_rate correct_rate_last8\n";
    for (std::size_t i = 0; i < round_curve.size(); ++i) {
      double correct = 0.0;
      double count = 0.0;
      for (std::size_t j = i >= 7 ? i - 7 : 0; j <= i; ++j) {
        correct += round_curve[j].correct_rate * static_cast<double>(round_curve[j].trajectories);
        count += static_cast<double>(round_curve[j].trajectories);
      }
      gencurve << round_curve[i].time << ' ' << round_curve[i].version << ' ' << round_curve[i].trajectories << ' '
               << round_curve[i].correct_rate << ' ' << (count > 0 ? correct / count : 0.0) << '\n';
    }
    std::ofstream gantt(plots + "/timeline-" + name + ".dat");
    gantt << "# row start_s end_s event_index process event half_height\n";
    const std::vector<std::string> events{"generate", "train",      "wait", "pull",   "publish",
                                          "send",     "checkpoint", "eval", "blocked"};
    for (const json& e : run.timeline) {
      const std::string process = e.value("process", "");
      const double row =
          process == "trainer" ? 0.0 : 1.0 + std::atof(process.substr(process.find('-') + 1).c_str());
      const std::string event = e.value("event", "");
      const auto index = std::find(events.begin(), events.end(), event) - events.begin();
      // A background pull (in-flight updates) runs beside generation: a thin bar above the row.
      const bool background = e.value("background", false);
      gantt << (background ? row + 0.3 : row) << ' ' << e.value("start", 0.0) - first_publish << ' '
            << e.value("end", 0.0) - first_publish << ' ' << index << ' ' << process << ' ' << event << ' '
            << (background ? 0.06 : 0.35) << '\n';
    }
  }

  json per_environment = json::object();
  std::uint64_t all_used_tokens = 0;
  for (const auto& [environment, totals] : environments) all_used_tokens += totals.used_tokens;
  for (const auto& [environment, totals] : environments) {
    const double arrived = std::max<double>(static_cast<double>(totals.arrived), 1.0);
    per_environment[environment] = {
        {"rollouts_arrived", totals.arrived},
        {"tokens_arrived", totals.arrived_tokens},
        {"correct_rate", totals.correct / arrived},
        {"reward_mean", totals.reward / arrived},
        {"frac_truncated", totals.truncated / arrived},
        {"rollouts_used", totals.used},
        {"tokens_used", totals.used_tokens},
        {"frac_of_tokens_used",
         all_used_tokens > 0 ? static_cast<double>(totals.used_tokens) / static_cast<double>(all_used_tokens) : 0.0},
        {"spilled_tokens", totals.spilled_tokens}};
  }
  const double step_median = median(step_seconds);
  return {{"environments", per_environment},
          {"wall_s", wall},
          {"steps", steps},
          {"trajectories", trajectories},
          {"trajectories_generated", generated},
          {"trajectories_sampled", sampled_total},
          {"trajectories_filtered", filtered_total},
          {"trajectories_trained", trained_total},
          {"trajectories_per_s", wall > 0 ? static_cast<double>(trajectories) / wall : 0.0},
          {"generated_per_s", wall > 0 ? static_cast<double>(generated) / wall : 0.0},
          {"tokens_per_s", wall > 0 ? static_cast<double>(tokens) / wall : 0.0},
          {"step_s_median", step_median},
          {"train_s_median", median(train_seconds)},
          {"staleness_mean", trajectories > 0 ? staleness_weighted / static_cast<double>(trajectories) : 0.0},
          {"staleness_max", staleness_max},
          {"dropped", dropped},
          {"pulls", pulls},
          {"pull_s_median", median(pull_seconds)},
          {"pull_share_of_step", step_median > 0 ? median(pull_seconds) / step_median : 0.0},
          {"in_flight_updates", in_flight},
          {"blocked_updates", blocked_seconds.size()},
          {"blocked_s_median", median(blocked_seconds)},
          {"blocked_s_p99", quantile(blocked_seconds, 0.99)},
          {"blocked_s_max", quantile(blocked_seconds, 1.0)},
          {"rounds", rounds},
          {"rounds_through_update", rounds_through_update},
          {"digests_checked", digests_checked},
          {"digests_matched", digests_matched},
          {"periodic_eval", periodic_eval}};
}

// The runs of a report: sync and async first (the demo's order), then any other name.
std::vector<std::string> run_names(const json& report) {
  std::vector<std::string> names;
  for (const char* name : {"sync", "async"}) {
    if (report.contains(name)) names.emplace_back(name);
  }
  for (const auto& [name, value] : report.items()) {
    if (name != "sync" && name != "async" && value.is_object() && value.contains("wall_s")) names.push_back(name);
  }
  return names;
}

// The policies of an evaluation table: the start first, then the control, then the runs in name order.
std::vector<std::string> policy_order(std::vector<std::string> names) {
  const auto rank = [](const std::string& name) { return name == "before" ? 0 : name == "control" ? 1 : 2; };
  std::stable_sort(names.begin(), names.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  return names;
}

void print_summary(const json& report) {
  const json eval = report.value("eval", json::object());
  if (!eval.empty()) {
    std::printf("evaluation: %d held-out %s tasks, seed %lld, greedy\n", eval.value("n", 0),
                eval.value("kind", "").c_str(), static_cast<long long>(eval.value("seed", 0LL)));
    std::printf("  %-22s %9s %8s %7s %6s\n", "policy", "accuracy", "format", "turns", "tools");
    std::vector<std::string> names;
    for (const auto& [name, entry] : eval.items()) {
      if (entry.is_object()) names.push_back(name);
    }
    for (const std::string& name : policy_order(names)) {
      const json& entry = eval[name];
      std::printf("  %-22s %8.1f%% %7.1f%% %7.2f %6.2f\n", name.c_str(), 100 * entry.value("accuracy", 0.0),
                  100 * entry.value("format_rate", 0.0), entry.value("avg_turns", 0.0),
                  entry.value("avg_tool_calls", 0.0));
    }
  }
  // Every environment evaluated, policy by policy (issue 33: the target and the checks beside it).
  const json environments = report.value("environments", json::object());
  if (environments.size() > 1) {
    std::printf("accuracy by environment (greedy, held-out):\n  %-22s", "policy");
    std::vector<std::string> policies;
    for (const auto& [environment, entries] : environments.items()) {
      std::printf(" %22s", environment.c_str());
      for (const auto& [policy, unused] : entries.items()) {
        if (std::find(policies.begin(), policies.end(), policy) == policies.end()) policies.push_back(policy);
      }
    }
    std::printf("\n");
    for (const std::string& policy : policy_order(policies)) {
      std::printf("  %-22s", policy.c_str());
      for (const auto& [environment, entries] : environments.items()) {
        if (entries.contains(policy)) {
          std::printf(" %21.1f%%", 100 * entries[policy].value("accuracy", 0.0));
        } else {
          std::printf(" %22s", "-");
        }
      }
      std::printf("\n");
    }
  }
  std::printf("runs:\n  %-16s %6s %6s %8s %8s %8s %9s %11s %10s\n", "run", "steps", "wall_s", "traj",
              "traj/s", "step_s", "stale", "pull_ms", "digests");
  for (const std::string& run : run_names(report)) {
    const char* name = run.c_str();
    const json& r = report[run];
    std::printf(
        "  %-16s %6d %6.0f %8llu %8.2f %8.2f %5.2f/%-3llu %11.2f %5llu/%llu\n", name, r.value("steps", 0),
        r.value("wall_s", 0.0), static_cast<unsigned long long>(r.value("trajectories", 0ULL)),
        r.value("trajectories_per_s", 0.0), r.value("step_s_median", 0.0), r.value("staleness_mean", 0.0),
        static_cast<unsigned long long>(r.value("staleness_max", 0ULL)), 1000 * r.value("pull_s_median", 0.0),
        static_cast<unsigned long long>(r.value("digests_matched", 0ULL)),
        static_cast<unsigned long long>(r.value("digests_checked", 0ULL)));
  }
  for (const std::string& run : run_names(report)) {
    const json& r = report[run];
    if (!r.contains("trajectories_sampled")) continue;
    std::printf("  %-8s trajectories: %llu sampled, %llu filtered at the source, %llu trained on\n", run.c_str(),
                static_cast<unsigned long long>(r.value("trajectories_sampled", 0ULL)),
                static_cast<unsigned long long>(r.value("trajectories_filtered", 0ULL)),
                static_cast<unsigned long long>(r.value("trajectories_trained", 0ULL)));
  }
  for (const std::string& run : run_names(report)) {
    const json run_environments = report[run].value("environments", json::object());
    for (const auto& [environment, e] : run_environments.items()) {
      std::printf("  %-8s %s: %llu rollouts arrived (%.1f%% correct, reward %.3f), %llu trained on (%llu tokens, "
                  "%.0f%% of the tokens trained on)\n",
                  run.c_str(), environment.c_str(), static_cast<unsigned long long>(e.value("rollouts_arrived", 0ULL)),
                  100 * e.value("correct_rate", 0.0), e.value("reward_mean", 0.0),
                  static_cast<unsigned long long>(e.value("rollouts_used", 0ULL)),
                  static_cast<unsigned long long>(e.value("tokens_used", 0ULL)),
                  100 * e.value("frac_of_tokens_used", 0.0));
    }
  }
  for (const std::string& run : run_names(report)) {
    if (report[run].value("blocked_updates", 0ULL) == 0) continue;
    const char* name = run.c_str();
    const json& r = report[run];
    std::printf(
        "  %-6s generation blocked per update (%s): median %.3f ms, p99 %.3f ms, max %.3f ms over %llu\n",
        name, r.value("in_flight_updates", false) ? "in-flight installs" : "foreground pulls",
        1000 * r.value("blocked_s_median", 0.0), 1000 * r.value("blocked_s_p99", 0.0),
        1000 * r.value("blocked_s_max", 0.0),
        static_cast<unsigned long long>(r.value("blocked_updates", 0ULL)));
    if (r.value("in_flight_updates", false)) {
      std::printf("  %-6s generation ran through an update in %llu of %llu rounds\n", name,
                  static_cast<unsigned long long>(r.value("rounds_through_update", 0ULL)),
                  static_cast<unsigned long long>(r.value("rounds", 0ULL)));
    }
  }
  const json& ws = report["weight_sync"];
  std::printf("weight sync: %s, %llu bytes per pull, %llu pulls, median %.2f ms (%.2f%% of a step)\n",
              ws.value("transport", "").c_str(),
              static_cast<unsigned long long>(ws.value("bytes_per_pull", 0ULL)),
              static_cast<unsigned long long>(ws.value("pulls", 0ULL)), 1000 * ws.value("median_s", 0.0),
              100 * ws.value("share_of_step", 0.0));
  const json& figures = report["figures"];
  for (const auto& [name, value] : figures.items()) {
    if (name.rfind("accuracy_gain_", 0) == 0) {
      const std::string run = name.substr(14);
      std::printf(
          "%-6s accuracy %+5.1f points: %.1f%% (%s the required %.0f%%), error %.1f%% -> %.1f%% (%s)\n",
          run.c_str(), 100 * value.get<double>(), 100 * figures.value("accuracy_after_" + run, 0.0),
          figures.value("meets_accuracy_" + run, false) ? "meets" : "MISSES",
          100 * figures.value("required_accuracy", 0.0), 100 * figures.value("error_before", 0.0),
          100 * figures.value("error_after_" + run, 0.0),
          figures.value("error_halved_" + run, false) ? "at least halved" : "NOT halved");
    }
  }
  if (report.contains("targets")) rl_report::print_targets(report["targets"]);
}

bool split_pair(const std::string& text, std::string& key, std::string& value) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  key = text.substr(0, eq);
  value = text.substr(eq + 1);
  return true;
}

// Reads an evaluation file; Error text in *error when it is not one.
bool read_eval(const std::string& path, json& eval, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return false;
  }
  eval = json::parse(in, nullptr, false);
  if (eval.is_discarded() || !eval.is_object() || !eval.contains("accuracy")) {
    error = path + " is not an evaluation JSON file (zorplex-eval --json)";
    return false;
  }
  return true;
}

// Reads evaluation files into `by_environment` (each file says its own;
// one without settings is `fallback`'s). false with `error` on the first bad one.
bool read_evals(const std::vector<std::string>& paths, const std::string& fallback,
                rl_report::EvalsByEnvironment& by_environment, std::string& error) {
  for (const std::string& path : paths) {
    json eval;
    if (!read_eval(path, eval, error)) return false;
    const std::string environment = rl_report::environment_of(eval, fallback);
    by_environment[environment] = std::move(eval);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Builds the RL demo's report.json (and plot data) from run folders and evaluation files."};
  std::vector<std::string> befores;
  std::vector<std::string> runs;
  std::vector<std::string> evals;
  std::vector<std::string> controls;
  std::string out;
  std::string plots;
  rl_report::TargetOptions target;
  std::string summarize;
  app.add_option("--summarize", summarize, "Print this report.json as a table and exit");
  app.add_option("--before", befores,
                 "zorplex-eval --json of the starting policy, one per environment (repeatable; needed for --eval "
                 "and the accuracy figures)");
  app.add_option("--run", runs, "NAME=DIR of an RL run (repeatable); NAME MODE/SEED makes it one seed of MODE");
  app.add_option("--eval", evals,
                 "NAME=FILE: zorplex-eval --json of that run's final policy (repeatable: one per environment)");
  app.add_option("--control", controls,
                 "zorplex-eval --json of the SFT-only control (the RL time spent on more SFT), one per environment "
                 "(repeatable)");
  app.add_option("--out", out, "report.json to write");
  app.add_option("--plots", plots, "Folder for the plot data (curve-NAME.dat, gencurve-NAME.dat, timeline-NAME.dat)");
  app.add_option("--target", target.environment,
                 "The environment RL must learn: its accuracy and error figures; every other one evaluated before "
                 "must not drop. An evaluation file without settings counts as this one")
      ->capture_default_str();
  app.add_option("--required-accuracy", target.required_accuracy,
                 "Greedy accuracy after RL the figures ask for on --target, mean over a mode's seeds (they also "
                 "ask every seed to halve the start's error)")
      ->capture_default_str();
  app.add_option("--required-lead", target.required_lead,
                 "Points (as a fraction) RL must lead the SFT-only control by on --target")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!summarize.empty()) {
    std::ifstream in(summarize);
    const json report = json::parse(in, nullptr, false);
    if (report.is_discarded() || !report.contains("weight_sync")) {
      std::fprintf(stderr, "rl-report: %s is not a report.json\n", summarize.c_str());
      return 1;
    }
    print_summary(report);
    return 0;
  }
  if (runs.empty() || out.empty()) {
    std::fprintf(stderr, "rl-report: --run and --out are required (or --summarize); see --help\n");
    return 2;
  }
  if (befores.empty() && (!evals.empty() || !controls.empty())) {
    std::fprintf(stderr,
                 "rl-report: --eval and --control need --before (the accuracy figures compare with it); see --help\n");
    return 2;
  }

  // The evaluations, by environment (each file says its own).
  std::string error;
  rl_report::EvalsByEnvironment before_by_env;
  rl_report::EvalsByEnvironment control_by_env;
  if (!read_evals(befores, target.environment, before_by_env, error) ||
      !read_evals(controls, target.environment, control_by_env, error)) {
    std::fprintf(stderr, "rl-report: %s\n", error.c_str());
    return 1;
  }
  std::map<std::string, rl_report::EvalsByEnvironment> evals_by_run;
  for (const std::string& pair : evals) {
    std::string name, path;
    if (!split_pair(pair, name, path)) {
      std::fprintf(stderr, "rl-report: --eval wants NAME=FILE, got %s\n", pair.c_str());
      return 2;
    }
    json eval;
    if (!read_eval(path, eval, error)) {
      std::fprintf(stderr, "rl-report: %s\n", error.c_str());
      return 1;
    }
    const std::string environment = rl_report::environment_of(eval, target.environment);
    evals_by_run[name][environment] = std::move(eval);
  }
  if (!before_by_env.empty() && before_by_env.count(target.environment) == 0) {
    std::fprintf(stderr, "rl-report: no --before evaluation is on the target environment %s (--target)\n",
                 target.environment.c_str());
    return 2;
  }

  // Without --before the report has the runs only: no evaluations, no accuracy figures.
  json report;
  const json before_eval =
      before_by_env.empty() ? json::object() : before_by_env.at(target.environment);
  if (!before_by_env.empty()) {
    const json settings = before_eval.value("settings", json::object());
    report["eval"] = {{"n", before_eval.value("tasks", 0)},
                      {"kind", target.environment},
                      {"seed", std::atoll(settings.value("seed", "0").c_str())},
                      {"greedy", settings.value("temperature", "") == "0.000000"},
                      {"before", eval_entry(before_eval)}};
    json environments = json::object();
    for (const auto& [environment, eval] : before_by_env) environments[environment]["before"] = eval_entry(eval);
    for (const auto& [environment, eval] : control_by_env) environments[environment]["control"] = eval_entry(eval);
    for (const auto& [name, by_env] : evals_by_run) {
      for (const auto& [environment, eval] : by_env) environments[environment]["after_" + name] = eval_entry(eval);
    }
    report["environments"] = environments;
  }
  if (!plots.empty()) std::filesystem::create_directories(plots);
  json weight_sync = json::object();
  std::vector<double> all_pulls;
  std::uint64_t total_pulls = 0;
  json figures = json::object();
  std::vector<double> step_medians;
  for (const std::string& pair : runs) {
    std::string name, dir;
    if (!split_pair(pair, name, dir)) {
      std::fprintf(stderr, "rl-report: --run wants NAME=DIR, got %s\n", pair.c_str());
      return 2;
    }
    if (!std::filesystem::exists(dir + "/trainer.jsonl")) {
      std::fprintf(stderr, "rl-report: %s has no trainer.jsonl (not an RL run folder)\n", dir.c_str());
      return 1;
    }
    // Plot data files are named after the run: MODE/SEED becomes MODE-SEED.
    std::string file_name = name;
    std::replace(file_name.begin(), file_name.end(), '/', '-');
    report[name] = summarize_run(file_name, read_run(dir), weight_sync, all_pulls, plots);
    total_pulls += report[name]["pulls"].get<std::uint64_t>();
    step_medians.push_back(report[name]["step_s_median"].get<double>());
    const auto run_evals = evals_by_run.find(name);
    const auto after = run_evals == evals_by_run.end() ? nullptr : &run_evals->second;
    if (after != nullptr && after->count(target.environment) != 0) {
      const json& after_eval = after->at(target.environment);
      report["eval"]["after_" + name] = eval_entry(after_eval);
      // On the target environment: the accuracy after RL against the
      // required one, and whether RL at least halved the start's error.
      const double after_accuracy = after_eval.value("accuracy", 0.0);
      const double start_accuracy = before_eval.value("accuracy", 0.0);
      figures["accuracy_gain_" + name] = after_accuracy - start_accuracy;
      figures["accuracy_after_" + name] = after_accuracy;
      figures["meets_accuracy_" + name] = after_accuracy >= target.required_accuracy - 1e-9;
      figures["error_after_" + name] = 1.0 - after_accuracy;
      figures["error_halved_" + name] = 1.0 - after_accuracy <= (1.0 - start_accuracy) / 2 + 1e-9;
    }
  }
  for (const auto& [name, by_env] : evals_by_run) {
    if (report.contains(name)) continue;
    std::fprintf(stderr, "rl-report: --eval %s=... names no --run (check the spelling)\n", name.c_str());
    return 2;
  }
  weight_sync["pulls"] = total_pulls;
  weight_sync["median_s"] = median(all_pulls);
  const double step_median = median(step_medians);
  weight_sync["share_of_step"] = step_median > 0 ? median(all_pulls) / step_median : 0.0;
  report["weight_sync"] = weight_sync;
  if (!before_by_env.empty()) {
    figures["required_accuracy"] = target.required_accuracy;
    figures["error_before"] = 1.0 - before_eval.value("accuracy", 0.0);
  }
  report["figures"] = figures;
  if (!evals_by_run.empty()) {
    report["targets"] = rl_report::check_targets(before_by_env, evals_by_run, control_by_env, target);
  }

  if (!plots.empty() && report.contains("eval")) {
    // Greedy evaluation accuracies for the learning-curve plot.
    std::ofstream labels(plots + "/evals.gp");
    for (const auto& [name, entry] : report["eval"].items()) {
      if (!entry.is_object()) continue;
      std::string label = name;
      std::replace(label.begin(), label.end(), '/', '_');
      labels << "eval_" << label << " = " << entry.value("accuracy", 0.0) << "\n";
    }
  }
  std::ofstream file(out);
  file << report.dump(2) << "\n";
  if (!file) {
    std::fprintf(stderr, "rl-report: cannot write %s\n", out.c_str());
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "rl-report: %s\n", e.what());
  return 1;
}
