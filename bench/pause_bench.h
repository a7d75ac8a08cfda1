// weightsync-bench pause: how long an update stops the engine, with the
// engine reading its weights the whole time (docs/perf/pause.md, issue 32).
//
// One process, per image size: a Publisher of one `size`-byte tensor in host
// memory (the trainer: a thread that publishes version v + 1 as soon as the
// engine made v live, or --interval-ms after the previous publish, whichever
// is later; each slot is written whole once, then each version only rewrites
// its marks, so the trainer's own work stays out of the figures). Per
// transport, an engine thread sums the 8-byte words of its live weights
// pass after pass (a forward pass reads every weight once) and, between two
// passes, takes the update its row is about:
//   foreground  Subscriber::pull into the live buffer: the engine is blocked
//               for the whole pull (blocked = the pull() call's wall time)
//   swap        StagedUpdates kSwap: a background thread pulled the version
//               into the library's staging buffer while the engine read;
//               install() swaps the pointers (blocked = blocked_seconds)
//   copy        StagedUpdates kCopy into a fixed contiguous live buffer:
//               install() copies the staged bytes (blocked = blocked_seconds)
// beside the baselines of the same run, each taken before the rows and again
// after: a memcpy of the same bytes (between two pre-faulted HostBuffers) and
// the engine's read rate with no update running. Each row also has the wall
// time of every pull() or install() call as the bench timed it, and each group
// the CPU other processes used meanwhile. The targets of issue 32 are checked
// per transport and size (evaluate_pause_targets). GB = 10^9 bytes.
//
// Contract: run_pause() runs on the calling thread and starts (and always
// joins) the trainer thread and the library's threads; it never throws: a
// failed row or group carries its error. The report functions are pure but
// for the file they write; write_pause_json() returns false with *error set.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace wsbench {

struct PauseTargets {
  double swap_of_foreground = 0.01;  // swap blocked median <= this x the foreground pull's median time
  double copy_of_memcpy = 1.2;       // copy blocked median <= this x a memcpy of the same bytes
  double pull_of_foreground = 0.8;   // background pull GB/s >= this x the foreground pull's
  double reader_of_idle = 0.7;       // reader GB/s during updates >= this x with none running
};

struct PauseConfig {
  std::vector<std::uint64_t> sizes = {256ull << 20, 1ull << 30};
  std::vector<std::string> transports = {"shm", "tcp"};
  int reps = 10;         // measured updates per row
  int warmup = 3;        // unmeasured updates first (every staging buffer written once)
  int interval_ms = 0;   // least time between two publishes (0: as soon as the last was installed)
  int idle_passes = 10;  // reader passes of the no-update baseline (and at least idle_seconds)
  double idle_seconds = 1.0;
  int memcpy_reps = 10;  // timed memcpys of the baseline (after one warm-up), before the rows and again after
  bool checksum = false;  // the publisher hashes each version, pulls verify it
  int timeout_s = 120;    // longest wait for one update
  PauseTargets targets;
};

// One measured update.
struct PauseSample {
  std::uint64_t version = 0;
  double blocked_s = 0;  // the engine's pause: the pull() call, or InstallResult::blocked_seconds
  double call_s = 0;     // the wall time of the pull() or install() call, taken by the bench
  double pull_s = 0;     // PullResult::seconds (the transfer)
  std::uint64_t pull_bytes = 0;
  double staged_s = 0;  // InstallResult::staged_seconds (0 for foreground)
  std::uint32_t retries = 0;
  bool marks_ok = false;  // the live weights carried this version's marks after the update
};

struct PauseRow {
  std::string name;  // foreground | swap | copy
  std::vector<PauseSample> samples;
  std::string error;
  // The engine's reads over the measured window (last warm-up update -> last measured update).
  double window_s = 0;
  std::uint64_t reader_bytes = 0;
  std::uint64_t reader_passes = 0;
  // Summaries over the samples (NaN when none).
  double blocked_median_s = 0, blocked_p99_s = 0, blocked_max_s = 0;
  double call_median_s = 0, call_p99_s = 0, call_max_s = 0;  // the pull() or install() call's wall time
  double pull_median_s = 0, pull_gbps_median = 0, staged_median_s = 0;
  double reader_gbps = 0;  // reader_bytes / window_s
  double pull_busy = 0;    // the measured pulls' seconds / window_s: how much of the window a pull ran
  // CPU this process (trainer, transfer and engine threads: the whole bench)
  // used over the measured window, in cores: what the row needs of the machine.
  double process_cpu_s = 0;
  double process_cores = 0;  // process_cpu_s / window_s
  // The whole machine's busy CPU (user, nice, system, irq, softirq; /proc/stat)
  // over the window: the process's share plus kernel threads' work, such as
  // loopback tcp's softirqs in ksoftirqd, plus anything else running.
  double machine_cpu_s = 0;
  double machine_cores = 0;  // machine_cpu_s / window_s
  void summarize();
};

struct PauseGroup {
  std::string transport;
  std::uint64_t size_bytes = 0;
  std::string skipped;  // the transport is not built or not viable here (no rows then)
  std::string error;    // the group could not run (no rows then)
  // Baselines, each taken before and after the rows: the memcpy's median over
  // both sets (and each set's), the reader's rate over both windows (and each's).
  double memcpy_median_s = 0, memcpy_before_s = 0, memcpy_after_s = 0;
  double memcpy_gbps = 0;
  int memcpy_reps = 0;
  double reader_idle_gbps = 0, reader_idle_before_gbps = 0, reader_idle_after_gbps = 0;
  std::uint64_t reader_idle_passes = 0;
  std::vector<PauseRow> rows;  // foreground, swap, copy
  // Meanwhile (the group's wall time): CPU of other processes and kernel
  // threads (user + nice + system ticks minus this process's), and steal, in cores.
  double other_cores = -1, steal_cores = -1;
  const PauseRow* row(const std::string& name) const;
};

// One target of issue 32 for one transport and size.
struct PauseCheck {
  std::string name;  // "swap pause", "copy pause", "background pull", "reader during updates"
  std::string transport;
  std::uint64_t size_bytes = 0;
  std::string target;    // "<= 1% of the foreground pull"
  std::string measured;  // "0.02 ms = 0.01% of 212 ms"
  double ratio = 0;      // measured / reference (NaN when not measured)
  double limit = 0;
  std::string verdict;  // PASS | FAIL | not measured
};

struct PauseReport {
  std::string host, machine, started_at, command_line, loadavg_start, loadavg_end;
  PauseConfig config;
  std::vector<PauseGroup> groups;  // size-major, then transport
  double wall_s = 0;
};

// Measures every transport at every size (stderr: progress lines).
PauseReport run_pause(const PauseConfig& config);

std::vector<PauseCheck> evaluate_pause_targets(const PauseReport& report);
void print_pause_table(std::FILE* out, const PauseReport& report, const std::vector<PauseCheck>& checks);
bool write_pause_json(const std::string& path, const PauseReport& report,
                      const std::vector<PauseCheck>& checks, std::string* error);

}  // namespace wsbench
