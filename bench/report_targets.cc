// The performance targets of docs/performance.md checked against a run:
// evaluate_targets, one TargetCheck per target and qualifying row (the GPU
// targets come from report_gpu.cc).
#include "report.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report_common.h"
#include "report_gpu.h"
#include "stats.h"

namespace wsbench {

using report_detail::figure_at;
using report_detail::finite;
using report_detail::kGiB;
using report_detail::kMiB;
using report_detail::label;
using report_detail::ms_text;
using report_detail::one_line;
using report_detail::sorted_records;

namespace {

constexpr std::uint64_t kTargetMinSize = 64 * kMiB;
constexpr std::uint64_t kCheckpointSize = kGiB;

// `value` shown with `decimals`; a miss is never rounded onto the passing side
// (floor for a lower bound, ceil for an upper bound).
std::string bounded_text(double value, int decimals, bool missed, bool lower_bound) {
  double shown = value;
  if (missed) {
    const double scale = std::pow(10.0, decimals);
    shown = lower_bound ? std::floor(value * scale) / scale : std::ceil(value * scale) / scale;
  }
  return fmt::format("{:.{}f}", shown, decimals);
}

TargetCheck not_measured(const std::string& name, const std::string& target, const std::string& note) {
  return TargetCheck{name, target, "-", "not measured", note};
}

// Why a baseline figure is unusable: its own note, or that it is missing.
std::string missing_figure_note(const BaselineFigure* figure, const std::string& what, std::uint64_t size) {
  if (figure == nullptr) return fmt::format("no {} figure at {}", what, format_size(size));
  if (!figure->note.empty()) return fmt::format("{}: {}", what, one_line(figure->note));
  return fmt::format("{} not measured at {}", what, format_size(size));
}

// The rows a target looks at: readers == 1 and size >= 64 MiB, sorted.
std::vector<const CellRecord*> qualifying(const BenchReport& report, const std::string& transport,
                                          const std::string* detail) {
  std::vector<const CellRecord*> out;
  for (const CellRecord* r : sorted_records(report)) {
    if (r->readers != 1 || r->size_bytes < kTargetMinSize) continue;
    if (!transport.empty() && r->transport != transport) continue;
    if (detail != nullptr && r->detail != *detail) continue;
    out.push_back(r);
  }
  return out;
}

// A row's own figure is unusable (failed cell, NaN): the note, else "".
std::string row_problem(const CellRecord& r) {
  if (!r.error.empty()) {
    return fmt::format("{} {} cell failed: {}", label(r), format_size(r.size_bytes), one_line(r.error));
  }
  if (!finite(r.gbps_median))
    return fmt::format("{} {} has no GB/s median", label(r), format_size(r.size_bytes));
  return "";
}

// gbps_median of `r` against `baseline` (figure or nullptr), >= `threshold`.
TargetCheck ratio_check(const std::string& name, double threshold, const CellRecord& r,
                        const BaselineFigure* baseline, const std::string& baseline_what,
                        std::uint64_t baseline_size, const std::string& note) {
  const std::string target = fmt::format(">= {:.0f}%", threshold * 100.0);
  const std::string problem = row_problem(r);
  if (!problem.empty()) return not_measured(name, target, problem);
  if (baseline == nullptr || !finite(baseline->gbps) || baseline->gbps <= 0.0) {
    return not_measured(name, target, missing_figure_note(baseline, baseline_what, baseline_size));
  }
  const double ratio = r.gbps_median / baseline->gbps;
  const bool met = ratio >= threshold;
  TargetCheck c;
  c.name = name;
  c.target = target;
  c.measured = fmt::format("{}% ({:.2f} vs {:.2f} GB/s, {})", bounded_text(ratio * 100.0, 0, !met, true),
                           r.gbps_median, baseline->gbps, format_size(r.size_bytes));
  c.verdict = met ? "met" : "MISSED";
  c.note = note;
  if (finite(r.limit_spread)) {
    // The limit's own spread during the row is the noise floor of the ratio.
    const bool within_noise = !met && ratio >= threshold * (1.0 - r.limit_spread);
    c.note = fmt::format("{}{}limit spread {:.0f}% during the row{}", c.note, c.note.empty() ? "" : "; ",
                         r.limit_spread * 100.0,
                         within_noise ? ": the shortfall is within the machine's noise" : "");
  }
  return c;
}

// How the row's own limit was measured (sweep.cc), for the target's note.
std::string limit_note(const CellRecord& r) {
  if (!finite(r.limit_gbps)) return "";
  if (r.limit_name == "memcpy paired") return "limit: the reader's memcpy of the same size before each pull";
  return "limit measured before, halfway through and after the row";
}

// The row's own limit (measured right before and after it, sweep.cc) when it
// has one, else the run's baseline at that size.
const BaselineFigure* limit_for(const CellRecord& r, const BaselineFigure* baseline, BaselineFigure* holder) {
  if (!finite(r.limit_gbps)) return baseline;
  holder->gbps = r.limit_gbps;
  holder->repetitions = baseline != nullptr ? baseline->repetitions : 0;
  holder->note = "the row's own limit (sweep.cc)";
  return holder;
}

void check_tcp(const BenchReport& report, std::vector<TargetCheck>* out) {
  const std::string raw_name = "tcp vs raw TCP stream", iperf_name = "tcp vs iperf3";
  const auto rows = qualifying(report, "tcp", nullptr);
  if (rows.empty()) {
    out->push_back(not_measured(raw_name, ">= 85%", "no tcp row >= 64 MiB with 1 reader"));
    out->push_back(not_measured(iperf_name, ">= 85%", "no tcp row >= 64 MiB with 1 reader"));
    return;
  }
  for (const CellRecord* r : rows) {
    BaselineFigure adjacent;
    out->push_back(ratio_check(raw_name, 0.85, *r,
                               limit_for(*r, figure_at(report.baselines.tcp_raw, r->size_bytes), &adjacent),
                               "tcp raw", r->size_bytes, limit_note(*r)));
  }
  for (const CellRecord* r : rows) {
    out->push_back(ratio_check(iperf_name, 0.85, *r, &report.baselines.iperf3, "iperf3", r->size_bytes,
                               "iperf3: one stream, size-independent"));
  }
}

void check_shm(const BenchReport& report, std::vector<TargetCheck>* out) {
  const std::string name = "shm vs memcpy (1 thread)";
  const auto rows = qualifying(report, "shm", nullptr);
  if (rows.empty()) {
    out->push_back(not_measured(name, ">= 90%", "no shm row >= 64 MiB with 1 reader"));
    return;
  }
  for (const CellRecord* r : rows) {
    BaselineFigure adjacent;
    out->push_back(ratio_check(name, 0.90, *r,
                               limit_for(*r, figure_at(report.baselines.memcpy_1t, r->size_bytes), &adjacent),
                               "memcpy 1 thread", r->size_bytes, limit_note(*r)));
  }
}

void check_ucx(const BenchReport& report, std::vector<TargetCheck>* out) {
  const std::string main_tls = "posix,self";
  const std::string main_name = "ucx " + main_tls + " vs ucx_perftest";
  const auto rows = qualifying(report, "ucx", &main_tls);
  const auto perf = report.baselines.ucx_perftest.find(main_tls);
  if (rows.empty()) {
    out->push_back(not_measured(main_name, ">= 100%", "no ucx posix,self row >= 64 MiB with 1 reader"));
  }
  for (const CellRecord* r : rows) {
    const BaselineFigure* f =
        perf == report.baselines.ucx_perftest.end() ? nullptr : figure_at(perf->second, r->size_bytes);
    BaselineFigure adjacent;
    out->push_back(ratio_check(main_name, 1.0, *r, limit_for(*r, f, &adjacent), "ucx_perftest " + main_tls,
                               r->size_bytes, limit_note(*r)));
  }
  // Informational: every other UCX_TLS that has an ucx_perftest series.
  for (const CellRecord* r : qualifying(report, "ucx", nullptr)) {
    if (r->detail == main_tls) continue;
    const auto it = report.baselines.ucx_perftest.find(r->detail);
    if (it == report.baselines.ucx_perftest.end()) continue;
    BaselineFigure adjacent;
    out->push_back(ratio_check("ucx " + r->detail + " vs ucx_perftest", 1.0, *r,
                               limit_for(*r, figure_at(it->second, r->size_bytes), &adjacent),
                               "ucx_perftest " + r->detail, r->size_bytes, "informational"));
  }
}

void check_checkpoint(const BenchReport& report, std::vector<TargetCheck>* out) {
  const std::string name = "fastest transport vs checkpoint file, 1 GiB";
  const std::string target = ">= 5.0x";
  const CellRecord* best = nullptr;
  bool any_row = false;
  for (const CellRecord* r : sorted_records(report)) {
    if (r->readers != 1 || r->size_bytes != kCheckpointSize) continue;
    any_row = true;
    if (!r->error.empty() || !finite(r->gbps_median)) continue;
    if (best == nullptr || r->gbps_median > best->gbps_median) best = r;
  }
  if (best == nullptr) {
    out->push_back(not_measured(name, target,
                                any_row ? "every 1 GiB row with 1 reader failed or has no GB/s median"
                                        : "no row at 1 GiB with 1 reader"));
    return;
  }
  const BaselineFigure* file = figure_at(report.baselines.file, kCheckpointSize);
  if (file == nullptr || !finite(file->gbps) || file->gbps <= 0.0) {
    out->push_back(not_measured(name, target, missing_figure_note(file, "checkpoint file", kCheckpointSize)));
    return;
  }
  const double factor = best->gbps_median / file->gbps;
  const bool met = factor >= 5.0;
  out->push_back(
      TargetCheck{name, target,
                  fmt::format("{}x ({:.2f} vs {:.2f} GB/s, 1 GiB)", bounded_text(factor, 1, !met, true),
                              best->gbps_median, file->gbps),
                  met ? "met" : "MISSED",
                  fmt::format("fastest: {}; file = write + read in the page cache", label(*best))});
}

void check_publish(const BenchReport& report, std::vector<TargetCheck>* out) {
  const std::string name = "publish vs memcpy";
  const std::string target = "<= 120% of memcpy";
  std::map<std::uint64_t, std::vector<const CellRecord*>> by_size;
  for (const CellRecord* r : qualifying(report, "", nullptr)) by_size[r->size_bytes].push_back(r);
  if (by_size.empty()) {
    out->push_back(not_measured(name, target, "no row >= 64 MiB with 1 reader"));
    return;
  }
  for (const auto& [size, rows] : by_size) {
    std::vector<double> publish;
    std::string used;
    for (const CellRecord* r : rows) {
      if (!r->error.empty() || !finite(r->publish_s_median)) continue;
      publish.push_back(r->publish_s_median);
      used += (used.empty() ? "" : ", ") + label(*r);
    }
    if (publish.empty()) {
      out->push_back(not_measured(name, target, fmt::format("no publish time at {}", format_size(size))));
      continue;
    }
    const BaselineFigure* mc = figure_at(report.baselines.memcpy_1t, size);
    if (mc == nullptr || !finite(mc->gbps) || mc->gbps <= 0.0) {
      out->push_back(not_measured(name, target, missing_figure_note(mc, "memcpy 1 thread", size)));
      continue;
    }
    const double pub_s = median(publish);
    const double memcpy_s = static_cast<double>(size) / (mc->gbps * 1e9);
    const double ratio = pub_s / memcpy_s;
    const bool met = ratio <= 1.2;
    out->push_back(
        TargetCheck{name, target,
                    fmt::format("{}% ({} vs {} ms, {})", bounded_text(ratio * 100.0, 0, !met, false),
                                ms_text(pub_s), ms_text(memcpy_s), format_size(size)),
                    met ? "met" : "MISSED",
                    fmt::format("median publish over {} row{} ({})", publish.size(),
                                publish.size() == 1 ? "" : "s", used)});
  }
}

}  // namespace

std::vector<TargetCheck> evaluate_targets(const BenchReport& report) {
  std::vector<TargetCheck> checks;
  try {
    check_tcp(report, &checks);
    check_shm(report, &checks);
    check_ucx(report, &checks);
    check_checkpoint(report, &checks);
    check_publish(report, &checks);
    report_detail::check_gpu(report, &checks);
  } catch (...) {
    // Out of memory while formatting: return what was evaluated.
  }
  return checks;
}

}  // namespace wsbench
