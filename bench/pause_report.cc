// The figures of `weightsync-bench pause` (pause_bench.h): row summaries, the
// targets of issue 32, the table and the JSON file.
#include <cmath>
#include <exception>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pause_bench.h"
#include "records.h"
#include "report.h"
#include "stats.h"

namespace wsbench {
namespace {

using Json = nlohmann::ordered_json;

Json number(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

// 4.2 us, 12.34 ms, 1.234 s; "-" when not finite.
std::string duration_text(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  if (seconds < 1e-3) return fmt::format("{:.1f} us", seconds * 1e6);
  if (seconds < 1.0) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.3f} s", seconds);
}

std::string gbps_text(double gbps) {
  return std::isfinite(gbps) ? fmt::format("{:.2f}", gbps) : "-";
}

// A ratio as a percentage with enough digits for 0.01%.
std::string percent_text(double ratio) {
  if (!std::isfinite(ratio)) return "-";
  if (ratio < 0.001) return fmt::format("{:.4f}%", ratio * 100);
  if (ratio < 0.1) return fmt::format("{:.2f}%", ratio * 100);
  return fmt::format("{:.0f}%", ratio * 100);
}

bool usable(const PauseRow* row) {
  return row != nullptr && row->error.empty() && !row->samples.empty();
}

// A check whose figures are `value` against `reference`: PASS when the ratio
// is <= limit (at_most) or >= limit (else).
PauseCheck check(const PauseGroup& g, std::string name, std::string target, double value, double reference,
                 double limit, bool at_most, std::string measured, const std::string& missing) {
  PauseCheck c;
  c.name = std::move(name);
  c.transport = g.transport;
  c.size_bytes = g.size_bytes;
  c.target = std::move(target);
  c.limit = limit;
  c.ratio = reference > 0 ? value / reference : kNaN;
  if (!missing.empty() || !std::isfinite(c.ratio)) {
    c.ratio = kNaN;
    c.verdict = "not measured";
    c.measured = missing.empty() ? "no figure" : missing;
    return c;
  }
  c.measured = std::move(measured);
  c.verdict = (at_most ? c.ratio <= limit : c.ratio >= limit) ? "PASS" : "FAIL";
  return c;
}

// Why a target over these rows cannot be checked ("" when it can).
std::string missing(const std::vector<const PauseRow*>& rows) {
  for (const PauseRow* r : rows) {
    if (r == nullptr) return "row not run";
    if (!r->error.empty()) return r->name + " failed: " + r->error;
    if (r->samples.empty()) return r->name + ": no update measured";
  }
  return "";
}

// The pause of `row` (InstallResult::blocked_seconds, or the wall time of
// the install() call with `wall`) against `reference_s`: PASS at <= limit.
PauseCheck pause_check(const PauseGroup& g, const PauseRow* row, bool wall, double reference_s,
                       const std::string& reference_name, double limit, const std::string& target,
                       const std::string& missing_text) {
  const double s = !usable(row) ? kNaN : wall ? row->call_median_s : row->blocked_median_s;
  const std::string name =
      (row ? row->name : std::string("?")) + (wall ? " pause, install() wall" : " pause");
  // A fraction of the foreground pull as a percentage, a multiple of memcpy as "1.07x".
  const std::string ratio =
      limit < 0.5 ? percent_text(s / reference_s) + " of" : fmt::format("{:.2f}x", s / reference_s);
  const std::string measured =
      fmt::format("{} = {} {} {}", duration_text(s), ratio, reference_name, duration_text(reference_s));
  return check(g, name, target, s, reference_s, limit, true, measured, missing_text);
}

void add_group_checks(const PauseGroup& g, const PauseTargets& t, std::vector<PauseCheck>* out) {
  const PauseRow* fg = g.row("foreground");
  const PauseRow* sw = g.row("swap");
  const PauseRow* cp = g.row("copy");
  const double fg_s = usable(fg) ? fg->blocked_median_s : kNaN;
  const double fg_gbps = usable(fg) ? fg->pull_gbps_median : kNaN;
  const double sw_gbps = usable(sw) ? sw->pull_gbps_median : kNaN;
  const double sw_reader = usable(sw) ? sw->reader_gbps : kNaN;
  const std::string swap_target =
      fmt::format("<= {} of the foreground pull", percent_text(t.swap_of_foreground));
  const std::string copy_target = fmt::format("<= {:.2f}x a memcpy of the same bytes", t.copy_of_memcpy);
  for (bool wall : {false, true}) {
    out->push_back(
        pause_check(g, sw, wall, fg_s, "foreground", t.swap_of_foreground, swap_target, missing({fg, sw})));
    out->push_back(
        pause_check(g, cp, wall, g.memcpy_median_s, "memcpy", t.copy_of_memcpy, copy_target, missing({cp})));
  }
  out->push_back(
      check(g, "background pull", fmt::format(">= {:.2f}x the foreground pull's GB/s", t.pull_of_foreground),
            sw_gbps, fg_gbps, t.pull_of_foreground, false,
            fmt::format("{} vs {} GB/s = {:.2f}x", gbps_text(sw_gbps), gbps_text(fg_gbps), sw_gbps / fg_gbps),
            missing({fg, sw})));
  out->push_back(check(g, "reader during updates",
                       fmt::format(">= {:.2f}x its rate with no update (swap)", t.reader_of_idle), sw_reader,
                       g.reader_idle_gbps, t.reader_of_idle, false,
                       fmt::format("{} vs {} GB/s = {:.2f}x", gbps_text(sw_reader),
                                   gbps_text(g.reader_idle_gbps), sw_reader / g.reader_idle_gbps),
                       missing({sw})));
}

Json row_json(const PauseRow& r, double idle_gbps) {
  Json o;
  o["name"] = r.name;
  o["updates"] = r.samples.size();
  if (!r.error.empty()) o["error"] = r.error;
  o["blocked_s_median"] = number(r.blocked_median_s);
  o["blocked_s_p99"] = number(r.blocked_p99_s);
  o["blocked_s_max"] = number(r.blocked_max_s);
  o["call_s_median"] = number(r.call_median_s);
  o["call_s_p99"] = number(r.call_p99_s);
  o["call_s_max"] = number(r.call_max_s);
  o["pull_s_median"] = number(r.pull_median_s);
  o["pull_gbps_median"] = number(r.pull_gbps_median);
  o["staged_s_median"] = number(r.staged_median_s);
  o["reader_gbps"] = number(r.reader_gbps);
  o["reader_of_idle"] = number(idle_gbps > 0 ? r.reader_gbps / idle_gbps : kNaN);
  o["pull_busy"] = number(r.pull_busy);
  o["process_cpu_s"] = number(r.process_cpu_s);
  o["process_cores"] = number(r.process_cores);
  o["machine_cpu_s"] = number(r.machine_cpu_s);
  o["machine_cores"] = number(r.machine_cores);
  o["reader_passes"] = r.reader_passes;
  o["reader_bytes"] = r.reader_bytes;
  o["window_s"] = number(r.window_s);
  Json samples = Json::array();
  for (const PauseSample& s : r.samples) {
    samples.push_back(Json{{"version", s.version},
                           {"blocked_s", s.blocked_s},
                           {"call_s", s.call_s},
                           {"pull_s", s.pull_s},
                           {"pull_bytes", s.pull_bytes},
                           {"staged_s", s.staged_s},
                           {"retries", s.retries},
                           {"marks_ok", s.marks_ok}});
  }
  o["samples"] = std::move(samples);
  return o;
}

Json config_json(const PauseConfig& c) {
  return Json{{"sizes_bytes", c.sizes},
              {"transports", c.transports},
              {"reps", c.reps},
              {"warmup", c.warmup},
              {"interval_ms", c.interval_ms},
              {"idle_passes", c.idle_passes},
              {"idle_seconds", c.idle_seconds},
              {"memcpy_reps", c.memcpy_reps},
              {"checksum", c.checksum},
              {"timeout_s", c.timeout_s},
              {"percentiles", "nearest rank (the p99 of 10 updates is their maximum)"},
              {"targets", Json{{"swap_of_foreground", c.targets.swap_of_foreground},
                               {"copy_of_memcpy", c.targets.copy_of_memcpy},
                               {"pull_of_foreground", c.targets.pull_of_foreground},
                               {"reader_of_idle", c.targets.reader_of_idle}}}};
}

Json report_json(const PauseReport& report, const std::vector<PauseCheck>& checks) {
  Json j;
  j["bench"] = "pause";
  j["host"] = report.host;
  j["machine"] = report.machine;
  j["started_at"] = report.started_at;
  j["command_line"] = report.command_line;
  j["loadavg_start"] = report.loadavg_start;
  j["loadavg_end"] = report.loadavg_end;
  j["wall_s"] = report.wall_s;
  j["config"] = config_json(report.config);
  Json groups = Json::array();
  for (const PauseGroup& g : report.groups) {
    Json o;
    o["transport"] = g.transport;
    o["size_bytes"] = g.size_bytes;
    if (!g.skipped.empty()) o["skipped"] = g.skipped;
    if (!g.error.empty()) o["error"] = g.error;
    o["other_cpu_cores"] = g.other_cores < 0 ? Json(nullptr) : Json(g.other_cores);
    o["steal_cores"] = g.steal_cores < 0 ? Json(nullptr) : Json(g.steal_cores);
    o["baselines"] = Json{{"memcpy_s_median", number(g.memcpy_median_s)},
                          {"memcpy_s_median_before", number(g.memcpy_before_s)},
                          {"memcpy_s_median_after", number(g.memcpy_after_s)},
                          {"memcpy_gbps", number(g.memcpy_gbps)},
                          {"memcpy_reps", g.memcpy_reps},
                          {"reader_idle_gbps", number(g.reader_idle_gbps)},
                          {"reader_idle_gbps_before", number(g.reader_idle_before_gbps)},
                          {"reader_idle_gbps_after", number(g.reader_idle_after_gbps)},
                          {"reader_idle_passes", g.reader_idle_passes}};
    Json rows = Json::array();
    for (const PauseRow& r : g.rows) rows.push_back(row_json(r, g.reader_idle_gbps));
    o["rows"] = std::move(rows);
    groups.push_back(std::move(o));
  }
  j["groups"] = std::move(groups);
  Json targets = Json::array();
  int passed = 0, failed = 0;
  for (const PauseCheck& c : checks) {
    passed += c.verdict == "PASS" ? 1 : 0;
    failed += c.verdict == "FAIL" ? 1 : 0;
    targets.push_back(Json{{"name", c.name},
                           {"transport", c.transport},
                           {"size_bytes", c.size_bytes},
                           {"target", c.target},
                           {"measured", c.measured},
                           {"ratio", number(c.ratio)},
                           {"limit", c.limit},
                           {"verdict", c.verdict}});
  }
  j["targets"] = std::move(targets);
  j["targets_passed"] = passed;
  j["targets_failed"] = failed;
  return j;
}

}  // namespace

void PauseRow::summarize() {
  std::vector<double> blocked, call, pull_s, pull_gbps, staged;
  for (const PauseSample& s : samples) {
    blocked.push_back(s.blocked_s);
    call.push_back(s.call_s);
    pull_s.push_back(s.pull_s);
    if (s.pull_s > 0) pull_gbps.push_back(static_cast<double>(s.pull_bytes) / 1e9 / s.pull_s);
    staged.push_back(s.staged_s);
  }
  blocked_median_s = median(blocked);
  blocked_p99_s = percentile(blocked, 99);
  blocked_max_s = percentile(blocked, 100);
  call_median_s = median(call);
  call_p99_s = percentile(call, 99);
  call_max_s = percentile(call, 100);
  pull_median_s = median(pull_s);
  pull_gbps_median = median(pull_gbps);
  staged_median_s = median(staged);
  reader_gbps = window_s > 0 ? static_cast<double>(reader_bytes) / 1e9 / window_s : kNaN;
  double pulling = 0;
  for (const PauseSample& s : samples) pulling += s.pull_s;
  pull_busy = window_s > 0 ? pulling / window_s : kNaN;
  process_cores = window_s > 0 ? process_cpu_s / window_s : kNaN;
  machine_cores = window_s > 0 ? machine_cpu_s / window_s : kNaN;
}

const PauseRow* PauseGroup::row(const std::string& name) const {
  for (const PauseRow& r : rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::vector<PauseCheck> evaluate_pause_targets(const PauseReport& report) {
  std::vector<PauseCheck> out;
  for (const PauseGroup& g : report.groups) {
    if (g.error.empty() && g.skipped.empty()) add_group_checks(g, report.config.targets, &out);
  }
  return out;
}

void print_pause_table(std::FILE* out, const PauseReport& report, const std::vector<PauseCheck>& checks) {
  const PauseConfig& c = report.config;
  std::fprintf(out,
               "Engine pause per update: %d measured updates per row after %d warm-up, medians; p99 nearest "
               "rank; GB = 10^9 bytes\n",
               c.reps, c.warmup);
  std::fprintf(
      out,
      "(blocked: InstallResult::blocked_seconds, or the foreground pull() call; call: the wall time of "
      "the pull() or install() call, taken by the bench; busy: the share of the reader's window a "
      "pull ran; cores: the CPU the whole bench process used over that window, and the machine's, softirqs "
      "included)\n");
  std::fprintf(out, "%-5s %-8s %-10s %3s %11s %11s %11s %11s %11s %9s %10s %5s %9s %8s %7s %10s\n", "tp",
               "size", "row", "n", "blocked med", "p99", "max", "call med", "call max", "pull GB/s", "pull med",
               "busy", "cores", "reader", "x idle", "staged med");
  for (const PauseGroup& g : report.groups) {
    const std::string size = format_size(g.size_bytes);
    if (!g.error.empty() || !g.skipped.empty()) {
      std::fprintf(out, "%-5s %-8s %s: %s\n", g.transport.c_str(), size.c_str(),
                   g.error.empty() ? "skipped" : "FAILED",
                   g.error.empty() ? g.skipped.c_str() : g.error.c_str());
      continue;
    }
    std::fprintf(
        out,
        "%-5s %-8s baselines: memcpy %s (%s GB/s, median of %d; before %s, after %s); reader alone %s "
        "GB/s (%llu passes; before %s, after %s); meanwhile other processes %.2f cores, steal %.2f\n",
        g.transport.c_str(), size.c_str(), duration_text(g.memcpy_median_s).c_str(),
        gbps_text(g.memcpy_gbps).c_str(), g.memcpy_reps, duration_text(g.memcpy_before_s).c_str(),
        duration_text(g.memcpy_after_s).c_str(), gbps_text(g.reader_idle_gbps).c_str(),
        static_cast<unsigned long long>(g.reader_idle_passes), gbps_text(g.reader_idle_before_gbps).c_str(),
        gbps_text(g.reader_idle_after_gbps).c_str(), g.other_cores, g.steal_cores);
    for (const PauseRow& r : g.rows) {
      const double of_idle = g.reader_idle_gbps > 0 ? r.reader_gbps / g.reader_idle_gbps : kNaN;
      std::fprintf(out, "%-5s %-8s %-10s %3zu %11s %11s %11s %11s %11s %9s %10s %5s %9s %8s %7s %10s%s%s\n",
                   g.transport.c_str(), size.c_str(), r.name.c_str(), r.samples.size(),
                   duration_text(r.blocked_median_s).c_str(), duration_text(r.blocked_p99_s).c_str(),
                   duration_text(r.blocked_max_s).c_str(), duration_text(r.call_median_s).c_str(),
                   duration_text(r.call_max_s).c_str(), gbps_text(r.pull_gbps_median).c_str(),
                   duration_text(r.pull_median_s).c_str(), percent_text(r.pull_busy).c_str(),
                   std::isfinite(r.process_cores)
                       ? fmt::format("{:.2f}/{:.2f}", r.process_cores, r.machine_cores).c_str()
                       : "-",
                   gbps_text(r.reader_gbps).c_str(),
                   std::isfinite(of_idle) ? fmt::format("{:.2f}x", of_idle).c_str() : "-",
                   r.name == "foreground" ? "-" : duration_text(r.staged_median_s).c_str(),
                   r.error.empty() ? "" : "  FAILED: ", r.error.c_str());
    }
  }
  std::fprintf(out, "\nTargets (issue 32):\n");
  for (const PauseCheck& k : checks) {
    std::fprintf(out, "  %-5s %-8s %-28s %-44s %-44s %s\n", k.transport.c_str(),
                 format_size(k.size_bytes).c_str(), k.name.c_str(), k.target.c_str(), k.measured.c_str(),
                 k.verdict.c_str());
  }
}

bool write_pause_json(const std::string& path, const PauseReport& report,
                      const std::vector<PauseCheck>& checks, std::string* error) {
  try {
    std::ofstream file(path);
    if (file) file << report_json(report, checks).dump(2) << "\n";
    if (!file) {
      if (error) *error = "cannot write " + path;
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    if (error) *error = "cannot write " + path + ": " + e.what();
    return false;
  }
}

}  // namespace wsbench
