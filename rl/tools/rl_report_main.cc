// rl-report: turns the files of RL runs into the demo's report.json and the
// data files its plots are drawn from.
//
//   rl-report --before EVAL.json --run sync=DIR --eval sync=EVAL.json
//             --run async=DIR --eval async=EVAL.json --out report.json [--plots DIR]
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
// median_s, share_of_step) and figures (accuracy gains, the accuracy
// required after RL, the error rate before and after and whether RL halved it).
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
  std::ofstream eval_curve;
  if (!plots.empty()) eval_curve.open(plots + "/evalcurve-" + name + ".dat");
  if (eval_curve) eval_curve << "# step wall_s accuracy tasks\n";
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
      periodic_eval.push_back({{"step", r.value("step", 0)},
                               {"version", r.value("version", std::uint64_t{0})},
                               {"wall_s", at},
                               {"tasks", r.value("tasks", 0)},
                               {"accuracy", r.value("accuracy", 0.0)}});
      if (eval_curve) {
        eval_curve << r.value("step", 0) << ' ' << at << ' ' << r.value("accuracy", 0.0) << ' '
                   << r.value("tasks", 0) << '\n';
      }
    } else if (event == "step") {
      ++steps;
      last_step = r.value("time", 0.0);
      step_seconds.push_back(r.value("step_seconds", 0.0));
      train_seconds.push_back(r.value("train_seconds", 0.0));
      const std::uint64_t n = r.value("trajectories", std::uint64_t{0});
      trajectories += n;
      staleness_weighted += r.value("staleness_mean", 0.0) * static_cast<double>(n);
      staleness_max = std::max(staleness_max, r.value("staleness_max", std::uint64_t{0}));
      dropped = r.value("dropped", json::object());
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
  for (const auto& [generator, records] : run.generators) {
    for (const json& r : records) {
      const std::string event = r.value("event", "");
      if (event == "round") {
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

  const double step_median = median(step_seconds);
  return {{"wall_s", wall},
          {"steps", steps},
          {"trajectories", trajectories},
          {"trajectories_generated", generated},
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

void print_summary(const json& report) {
  const json eval = report.value("eval", json::object());
  if (!eval.empty()) {
    std::printf("evaluation: %d held-out %s tasks, seed %lld, greedy\n", eval.value("n", 0),
                eval.value("kind", "").c_str(), static_cast<long long>(eval.value("seed", 0LL)));
    std::printf("  %-12s %9s %8s %7s %6s\n", "policy", "accuracy", "format", "turns", "tools");
    for (const char* name : {"before", "after_sync", "after_async"}) {
      if (!eval.contains(name)) continue;
      const json& entry = eval[name];
      std::printf("  %-12s %8.1f%% %7.1f%% %7.2f %6.2f\n", name, 100 * entry.value("accuracy", 0.0),
                  100 * entry.value("format_rate", 0.0), entry.value("avg_turns", 0.0),
                  entry.value("avg_tool_calls", 0.0));
    }
  }
  std::printf("runs:\n  %-6s %6s %6s %8s %8s %8s %9s %11s %10s\n", "mode", "steps", "wall_s", "traj",
              "traj/s", "step_s", "stale", "pull_ms", "digests");
  for (const std::string& run : run_names(report)) {
    const char* name = run.c_str();
    const json& r = report[run];
    std::printf(
        "  %-6s %6d %6.0f %8llu %8.2f %8.2f %5.2f/%-3llu %11.2f %5llu/%llu\n", name, r.value("steps", 0),
        r.value("wall_s", 0.0), static_cast<unsigned long long>(r.value("trajectories", 0ULL)),
        r.value("trajectories_per_s", 0.0), r.value("step_s_median", 0.0), r.value("staleness_mean", 0.0),
        static_cast<unsigned long long>(r.value("staleness_max", 0ULL)), 1000 * r.value("pull_s_median", 0.0),
        static_cast<unsigned long long>(r.value("digests_matched", 0ULL)),
        static_cast<unsigned long long>(r.value("digests_checked", 0ULL)));
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
}

bool split_pair(const std::string& text, std::string& key, std::string& value) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  key = text.substr(0, eq);
  value = text.substr(eq + 1);
  return true;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Builds the RL demo's report.json (and plot data) from run folders and evaluation files."};
  std::string before;
  std::vector<std::string> runs;
  std::vector<std::string> evals;
  std::string out;
  std::string plots;
  double required_accuracy = 0.90;
  std::string summarize;
  app.add_option("--summarize", summarize, "Print this report.json as a table and exit");
  app.add_option("--before", before, "zorplex-eval --json of the starting policy (needed for --eval and the accuracy figures)");
  app.add_option("--run", runs, "NAME=DIR of an RL run (repeatable)");
  app.add_option("--eval", evals, "NAME=FILE: zorplex-eval --json of that run's final policy (repeatable)");
  app.add_option("--out", out, "report.json to write");
  app.add_option("--plots", plots, "Folder for the plot data (curve-NAME.dat, timeline-NAME.dat)");
  app.add_option("--required-accuracy", required_accuracy,
                 "Greedy accuracy after RL the figures ask for (they also ask RL to halve the start's error)")
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
  if (before.empty() && !evals.empty()) {
    std::fprintf(stderr, "rl-report: --eval needs --before (the accuracy figures compare the two); see --help\n");
    return 2;
  }

  // Without --before the report has the runs only: no evaluations, no accuracy figures.
  json before_eval = json::object();
  json report;
  if (!before.empty()) {
    std::ifstream before_file(before);
    before_eval = json::parse(before_file, nullptr, false);
    if (before_eval.is_discarded()) {
      std::fprintf(stderr, "rl-report: %s is not an evaluation JSON file\n", before.c_str());
      return 1;
    }
    const json settings = before_eval.value("settings", json::object());
    report["eval"] = {{"n", before_eval.value("tasks", 0)},
                      {"kind", settings.value("kind", "") + ":" + settings.value("difficulty", "")},
                      {"seed", std::atoll(settings.value("seed", "0").c_str())},
                      {"greedy", settings.value("temperature", "") == "0.000000"},
                      {"before", eval_entry(before_eval)}};
  }
  if (!plots.empty()) std::filesystem::create_directories(plots);
  json weight_sync = json::object();
  std::vector<double> all_pulls;
  std::uint64_t total_pulls = 0;
  json figures = json::object();
  std::map<std::string, json> evals_by_run;
  for (const std::string& pair : evals) {
    std::string name, path;
    if (!split_pair(pair, name, path)) {
      std::fprintf(stderr, "rl-report: --eval wants NAME=FILE, got %s\n", pair.c_str());
      return 2;
    }
    std::ifstream in(path);
    evals_by_run[name] = json::parse(in, nullptr, false);
    if (evals_by_run[name].is_discarded()) {
      std::fprintf(stderr, "rl-report: %s is not an evaluation JSON file\n", path.c_str());
      return 1;
    }
  }
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
    report[name] = summarize_run(name, read_run(dir), weight_sync, all_pulls, plots);
    total_pulls += report[name]["pulls"].get<std::uint64_t>();
    step_medians.push_back(report[name]["step_s_median"].get<double>());
    if (evals_by_run.count(name) != 0) {
      report["eval"]["after_" + name] = eval_entry(evals_by_run[name]);
      // Issue 19's targets: at least required_accuracy after RL, and RL at
      // least halves the starting policy's error rate.
      const double after_accuracy = evals_by_run[name].value("accuracy", 0.0);
      const double start_accuracy = before_eval.value("accuracy", 0.0);
      figures["accuracy_gain_" + name] = after_accuracy - start_accuracy;
      figures["accuracy_after_" + name] = after_accuracy;
      figures["meets_accuracy_" + name] = after_accuracy >= required_accuracy - 1e-9;
      figures["error_after_" + name] = 1.0 - after_accuracy;
      figures["error_halved_" + name] = 1.0 - after_accuracy <= (1.0 - start_accuracy) / 2 + 1e-9;
    }
  }
  weight_sync["pulls"] = total_pulls;
  weight_sync["median_s"] = median(all_pulls);
  const double step_median = median(step_medians);
  weight_sync["share_of_step"] = step_median > 0 ? median(all_pulls) / step_median : 0.0;
  report["weight_sync"] = weight_sync;
  if (!before.empty()) {
    figures["required_accuracy"] = required_accuracy;
    figures["error_before"] = 1.0 - before_eval.value("accuracy", 0.0);
  }
  report["figures"] = figures;

  if (!plots.empty() && report.contains("eval")) {
    // Greedy evaluation accuracies for the learning-curve plot.
    std::ofstream labels(plots + "/evals.gp");
    for (const auto& [name, entry] : report["eval"].items()) {
      if (entry.is_object()) labels << "eval_" << name << " = " << entry.value("accuracy", 0.0) << "\n";
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
