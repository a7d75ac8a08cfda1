// PauseCli: the options of `weightsync-bench pause`, and the run: measure,
// print the table and the targets, write the JSON.
#include "pause_cli.h"

#include "cli_values.h"
#include "machine.h"

namespace wsbench {

PauseCli::PauseCli(CLI::App& app) {
  pause_ = app.add_subcommand(
      "pause",
      "The engine's pause per update (issue 32), with an engine thread summing its live weights the whole "
      "time: a foreground Subscriber::pull into the live buffer (blocked for the whole pull), StagedUpdates "
      "swap (background pull, install swaps pointers) and copy (install memcpys into fixed addresses), "
      "beside "
      "a memcpy of the same bytes and the engine's read rate with no update, in one process and one run; "
      "PASS/FAIL per target. docs/perf/pause.md");
  sizes_option_ = pause_->add_option("--sizes", sizes_, "Image sizes, comma-separated (B, KiB, MiB, GiB)")
                      ->capture_default_str();
  pause_->add_option("--transports", transports_, "Transports, comma-separated (shm, tcp)")
      ->capture_default_str();
  pause_->add_option("--reps", config_.reps, "Measured updates per row (>= 10 for published figures)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  pause_
      ->add_option("--warmup", config_.warmup,
                   "Unmeasured updates per row first (>= 2: both swap buffers written once)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  pause_
      ->add_option("--interval-ms", config_.interval_ms,
                   "Least time between two publishes; 0: the trainer publishes the next version as soon as "
                   "the engine made the last one live (updates back to back: the harshest case)")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  pause_
      ->add_option("--idle-passes", config_.idle_passes,
                   "Reader passes of the no-update baseline, before the rows and again after (and at least "
                   "--idle-seconds)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  pause_->add_option("--idle-seconds", config_.idle_seconds, "Least length of the no-update baseline")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  pause_
      ->add_option("--memcpy-reps", config_.memcpy_reps,
                   "Timed memcpys of the baseline (after one warm-up), before the rows and again after")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  pause_->add_flag("--checksum", config_.checksum,
                   "The publisher hashes every version (xxHash3) and every pull verifies it (off: the "
                   "figures are the transfer alone)");
  pause_->add_option("--timeout", config_.timeout_s, "Longest wait for one update, seconds")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  pause_->add_flag("--quick", quick_, "Preset: 64 MiB (unless --sizes given) and a 0.3 s reader baseline");
  pause_->add_option("--json", json_,
                     "Write the rows, every update, the baselines and the target checks to FILE");
}

std::optional<int> PauseCli::run(const std::string& command_line) {
  if (!*pause_) return std::nullopt;
  if (quick_) {
    if (sizes_option_->count() == 0) sizes_ = "64MiB";
    config_.idle_seconds = std::min(config_.idle_seconds, 0.3);
  }
  config_.sizes.clear();
  for (const auto& s : split_list(sizes_)) config_.sizes.push_back(parse_bytes(s, "--sizes", 4096));
  config_.transports = split_list(transports_);
  if (config_.sizes.empty() || config_.transports.empty()) {
    std::fprintf(stderr, "weightsync-bench pause: --sizes and --transports must name at least one\n");
    return 2;
  }
  PauseReport report = run_pause(config_);
  report.command_line = command_line;
  report.machine = describe_machine(MemoryShown::kYes);
  const std::vector<PauseCheck> checks = evaluate_pause_targets(report);
  std::printf("\n");
  print_pause_table(stdout, report, checks);
  int rc = 0;
  std::string error;
  if (!json_.empty() && !write_pause_json(json_, report, checks, &error)) {
    std::fprintf(stderr, "weightsync-bench pause: %s\n", error.c_str());
    rc = 1;
  }
  std::size_t failed = 0, rows = 0;
  for (const auto& g : report.groups) {
    failed += g.error.empty() ? 0 : 1;
    for (const auto& r : g.rows) {
      ++rows;
      failed += r.error.empty() ? 0 : 1;
    }
  }
  std::printf("\nweightsync-bench pause: %zu rows, %zu failed, %.1f s (%s)\n", rows, failed, report.wall_s,
              report.machine.c_str());
  return failed > 0 ? 1 : rc;
}

}  // namespace wsbench
