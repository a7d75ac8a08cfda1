// Rendering a BenchReport: the terminal table (ib_read_bw / ucx_perftest
// style, a ratio-to-limit column on every row), the target checks of
// docs/performance.md, CSV, JSON (and reading it back) and gnuplot PNGs.
//
// Contract: calling thread only; never throws. The write_* functions return
// false and set *error (with what to do) when the file cannot be written or a
// tool (gnuplot) is missing.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "records.h"

namespace wsbench {

void print_table(std::FILE* out, const BenchReport& report);

// One line per performance target: what it asks, what was measured, and
// "met", "MISSED" or "not measured" (with why).
struct TargetCheck {
  std::string name;      // e.g. "shm vs memcpy (1 thread)"
  std::string target;    // e.g. ">= 90%"
  std::string measured;  // e.g. "97% (9.1 vs 9.4 GB/s, 64 MiB)"
  std::string verdict;   // "met" | "MISSED" | "not measured"
  std::string note;
};
std::vector<TargetCheck> evaluate_targets(const BenchReport& report);
void print_targets(std::FILE* out, const std::vector<TargetCheck>& checks);

bool write_csv(const std::string& path, const BenchReport& report, std::string* error);
bool write_json(const std::string& path, const BenchReport& report, const std::vector<TargetCheck>& checks,
                std::string* error);
// Two PNGs (gnuplot): at `path`, one panel per transport (and per GPU row
// kind) with its measured GB/s and the limits that apply to it, on shared
// axes; at fraction_plot_path(path), every row's ratio to its own limit.
bool write_plot(const std::string& path, const BenchReport& report, std::string* error);
// "sweep.png" -> "sweep-fraction.png"; "out" -> "out-fraction.png".
std::string fraction_plot_path(const std::string& plot_path);

// Reads back the JSON write_json wrote (records, baselines, the GPU part; not
// the target checks), e.g. to redraw its plots (`weightsync-bench replot`).
bool load_report_json(const std::string& path, BenchReport* report, std::string* error);

// "64 MiB", "1 GiB", "4 KiB", "1000 B".
std::string format_size(std::uint64_t bytes);

}  // namespace wsbench
