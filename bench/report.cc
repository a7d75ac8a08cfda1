// Rendering a BenchReport: the text tables (results, limits, targets), the
// target checks, CSV, JSON (nlohmann::ordered_json, NaN -> null) and a PNG drawn
// by gnuplot from temporary data and script files.
#include "report.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stats.h"

namespace wsbench {
namespace {

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = 1024 * kKiB;
constexpr std::uint64_t kGiB = 1024 * kMiB;
constexpr std::uint64_t kTargetMinSize = 64 * kMiB;
constexpr std::uint64_t kCheckpointSize = kGiB;
constexpr std::size_t kMaxLine = 200;  // text tables stay within this many columns

// ---------------------------------------------------------------------------
// Small text helpers.

bool finite(double v) {
  return std::isfinite(v);
}

// One line of text: control characters become spaces.
std::string one_line(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return out;
}

// At most `max` bytes, "..." marking a cut (never inside a UTF-8 sequence).
std::string truncate(const std::string& s, std::size_t max) {
  if (s.size() <= max) return s;
  if (max <= 3) return s.substr(0, max);
  std::size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

std::string num(double v, const char* spec) {
  if (!finite(v)) return "-";
  return fmt::format(fmt::runtime(spec), v);
}

std::string gbps_text(double gbps) {
  return num(gbps, "{:.2f}");
}

// Seconds shown as milliseconds with about three significant digits.
std::string ms_text(double seconds) {
  if (!finite(seconds)) return "-";
  const double ms = seconds * 1e3;
  if (std::fabs(ms) >= 100.0) return fmt::format("{:.1f}", ms);
  if (std::fabs(ms) >= 1.0) return fmt::format("{:.2f}", ms);
  return fmt::format("{:.3f}", ms);
}

std::string percent_text(double fraction) {
  if (!finite(fraction)) return "-";
  return fmt::format("{:.0f}%", fraction * 100.0);
}

int transport_rank(const std::string& transport) {
  static const char* const kOrder[] = {"verbs", "ucx", "shm", "tcp"};
  for (int i = 0; i < 4; ++i) {
    if (transport == kOrder[i]) return i;
  }
  return 4;
}

bool record_less(const CellRecord& a, const CellRecord& b) {
  const int ra = transport_rank(a.transport), rb = transport_rank(b.transport);
  if (ra != rb) return ra < rb;
  if (a.transport != b.transport) return a.transport < b.transport;
  if (a.detail != b.detail) return a.detail < b.detail;
  if (a.size_bytes != b.size_bytes) return a.size_bytes < b.size_bytes;
  return a.readers < b.readers;
}

std::vector<const CellRecord*> sorted_records(const BenchReport& report) {
  std::vector<const CellRecord*> rows;
  rows.reserve(report.records.size());
  for (const CellRecord& r : report.records) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const CellRecord* a, const CellRecord* b) { return record_less(*a, *b); });
  return rows;
}

std::string label(const CellRecord& r) {
  return r.detail.empty() ? r.transport : r.transport + " " + r.detail;
}

// ---------------------------------------------------------------------------
// Fixed-width tables: a two-line header, right-aligned numbers, and rows that
// may stop after a few columns and end with free text (FAILED: ..., notes).

struct Column {
  std::string head1, head2;
  bool left = false;  // left-aligned (text) or right-aligned (numbers)
};

struct Row {
  std::vector<std::string> cells;  // the first cells.size() columns
  std::string tail;                // free text after them, cut to fit kMaxLine
};

class TextTable {
 public:
  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add(Row row) { rows_.push_back(std::move(row)); }

  // The header's two lines, then one line per row (no newlines, no trailing spaces).
  std::vector<std::string> render() const {
    std::vector<std::size_t> width(columns_.size(), 0);
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      width[c] = std::max(columns_[c].head1.size(), columns_[c].head2.size());
    }
    for (const Row& row : rows_) {
      for (std::size_t c = 0; c < row.cells.size() && c < width.size(); ++c) {
        width[c] = std::max(width[c], row.cells[c].size());
      }
    }
    std::vector<std::string> lines;
    lines.push_back(line(width, head_cells(true), ""));
    bool two_line_header = false;
    for (const Column& c : columns_) two_line_header = two_line_header || !c.head2.empty();
    if (two_line_header) lines.push_back(line(width, head_cells(false), ""));
    for (const Row& row : rows_) lines.push_back(line(width, row.cells, row.tail));
    return lines;
  }

 private:
  std::vector<std::string> head_cells(bool first) const {
    std::vector<std::string> cells;
    for (const Column& c : columns_) cells.push_back(first ? c.head1 : c.head2);
    return cells;
  }

  std::string line(const std::vector<std::size_t>& width, const std::vector<std::string>& cells,
                   const std::string& tail) const {
    std::string out;
    for (std::size_t c = 0; c < cells.size() && c < width.size(); ++c) {
      if (c > 0) out += "  ";
      const bool last = c + 1 == cells.size() && tail.empty();
      if (columns_[c].left) {
        out += last ? cells[c] : fmt::format("{:<{}}", cells[c], width[c]);
      } else {
        out += fmt::format("{:>{}}", cells[c], width[c]);
      }
    }
    if (!tail.empty()) {
      if (!out.empty()) out += "  ";
      const std::size_t room = out.size() < kMaxLine ? kMaxLine - out.size() : 20;
      out += truncate(one_line(tail), std::max<std::size_t>(room, 20));
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  }

  std::vector<Column> columns_;
  std::vector<Row> rows_;
};

void print_lines(std::FILE* out, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) fmt::print(out, "{}\n", l);
}

std::size_t widest(const std::vector<std::string>& lines) {
  std::size_t w = 0;
  for (const std::string& l : lines) w = std::max(w, l.size());
  return w;
}

// ---------------------------------------------------------------------------
// Baselines as a flat list of named series.

struct NamedSeries {
  std::string key;   // JSON / notes key: "memcpy_1t", "ucx_perftest posix,self", ...
  std::string name;  // display name
  std::string tls;   // ucx_perftest only
  const std::map<std::uint64_t, BaselineFigure>* figures;
};

std::vector<NamedSeries> baseline_series(const Baselines& b) {
  std::vector<NamedSeries> out;
  out.push_back({"memcpy_1t", "memcpy 1 thread", "", &b.memcpy_1t});
  out.push_back({"memcpy_2t", "memcpy 2 threads", "", &b.memcpy_2t});
  out.push_back({"tcp_raw", "tcp raw (own sender/receiver)", "", &b.tcp_raw});
  for (const auto& [tls, figures] : b.ucx_perftest) {
    out.push_back({"ucx_perftest " + tls, "ucx_perftest ucp_get " + tls, tls, &figures});
  }
  out.push_back({"file", "checkpoint file (page cache)", "", &b.file});
  out.push_back({"file_fsync", "checkpoint file (fsync + read from disk)", "", &b.file_fsync});
  return out;
}

const BaselineFigure* figure_at(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size) {
  const auto it = figures.find(size);
  return it == figures.end() ? nullptr : &it->second;
}

double gbps_at(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size) {
  const BaselineFigure* f = figure_at(figures, size);
  return f ? f->gbps : kNaN;
}

// ---------------------------------------------------------------------------
// Target checks.

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

// ---------------------------------------------------------------------------
// Files.

std::string errno_text(int err) {
  return std::strerror(err);
}

// Writes `text` to `path` (replacing it).
bool write_text_file(const std::string& path, const std::string& text, std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    const int err = errno;
    if (error)
      *error = fmt::format("cannot create {}: {} (check that the directory exists and is writable)", path,
                           errno_text(err));
    return false;
  }
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    if (error)
      *error = fmt::format("cannot write {}: {} (disk full?)", path, errno_text(wrote ? errno : write_err));
    return false;
  }
  return true;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string csv_number(double v) {
  return finite(v) ? fmt::format("{}", v) : "";
}

using Json = nlohmann::ordered_json;

Json json_number(double v) {
  return finite(v) ? Json(v) : Json(nullptr);
}

// The figure at `reference`, else at the largest size that has a finite one.
// Returns the size used (0 if none).
std::uint64_t pick_reference(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t reference,
                             double* gbps) {
  *gbps = kNaN;
  const BaselineFigure* f = figure_at(figures, reference);
  if (f != nullptr && finite(f->gbps)) {
    *gbps = f->gbps;
    return reference;
  }
  for (auto it = figures.rbegin(); it != figures.rend(); ++it) {
    if (finite(it->second.gbps)) {
      *gbps = it->second.gbps;
      return it->first;
    }
  }
  return 0;
}

// The notes of one series: the single note if every size shares it, else
// "64 MiB: ...; 1 GiB: ...". Empty if no figure has a note.
std::string series_note(const std::map<std::uint64_t, BaselineFigure>& figures) {
  std::set<std::string> distinct;
  std::size_t with_note = 0;
  for (const auto& [size, f] : figures) {
    if (f.note.empty()) continue;
    distinct.insert(f.note);
    ++with_note;
  }
  if (distinct.empty()) return "";
  if (distinct.size() == 1 && with_note == figures.size()) return *distinct.begin();
  std::string out;
  for (const auto& [size, f] : figures) {
    if (f.note.empty()) continue;
    out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", format_size(size), f.note);
  }
  return out;
}

Json build_json(const BenchReport& report, const std::vector<TargetCheck>& checks) {
  Json j;
  j["host"] = report.host;
  j["started_at"] = report.started_at;
  j["command_line"] = report.command_line;
  j["reference_size_bytes"] = report.reference_size;

  Json records = Json::array();
  for (const CellRecord* r : sorted_records(report)) {
    Json o;
    o["transport"] = r->transport;
    o["detail"] = r->detail;
    o["size_bytes"] = r->size_bytes;
    o["readers"] = r->readers;
    o["repetitions"] = r->repetitions;
    o["gbps_median"] = json_number(r->gbps_median);
    o["gbps_p99"] = json_number(r->gbps_p99);
    o["latency_s_median"] = json_number(r->latency_s_median);
    o["latency_s_p99"] = json_number(r->latency_s_p99);
    o["commit_to_all_s_median"] = json_number(r->commit_to_all_s_median);
    o["commit_to_all_s_p99"] = json_number(r->commit_to_all_s_p99);
    o["publish_s_median"] = json_number(r->publish_s_median);
    o["compute_slowdown"] = json_number(r->compute_slowdown);
    o["publisher_cpu_s_per_gb"] = json_number(r->publisher_cpu_s_per_gb);
    o["reader_cpu_s_per_gb"] = json_number(r->reader_cpu_s_per_gb);
    o["limit"] = r->limit_name;
    o["limit_gbps"] = json_number(r->limit_gbps);
    o["limit_spread"] = json_number(r->limit_spread);
    o["memcpy_paired_gbps"] = json_number(r->memcpy_paired_gbps);
    o["ratio_to_limit"] = json_number(r->ratio_to_limit);
    if (!r->error.empty()) o["error"] = r->error;
    records.push_back(std::move(o));
  }
  j["records"] = std::move(records);

  const Baselines& b = report.baselines;
  const std::uint64_t ref = report.reference_size;
  Json base;
  Json taken_at;
  const auto single = [&](const char* key, const char* short_key,
                          const std::map<std::uint64_t, BaselineFigure>& f) {
    double gbps = kNaN;
    const std::uint64_t at = pick_reference(f, ref, &gbps);
    base[key] = json_number(gbps);
    taken_at[short_key] = at == 0 ? Json(nullptr) : Json(at);
  };
  single("memcpy_1t_gbps", "memcpy_1t", b.memcpy_1t);
  single("memcpy_2t_gbps", "memcpy_2t", b.memcpy_2t);
  single("tcp_raw_gbps", "tcp_raw", b.tcp_raw);
  base["iperf3_gbps"] = json_number(b.iperf3.gbps);
  Json ucx = Json::object();
  Json ucx_at = Json::object();
  for (const auto& [tls, figures] : b.ucx_perftest) {
    double gbps = kNaN;
    const std::uint64_t at = pick_reference(figures, ref, &gbps);
    ucx[tls] = json_number(gbps);
    ucx_at[tls] = at == 0 ? Json(nullptr) : Json(at);
  }
  base["ucx_perftest_gbps"] = std::move(ucx);
  single("file_gbps", "file", b.file);
  single("file_fsync_gbps", "file_fsync", b.file_fsync);
  taken_at["ucx_perftest"] = std::move(ucx_at);
  base["taken_at_size_bytes"] = std::move(taken_at);

  std::set<std::uint64_t> sizes;
  for (const NamedSeries& s : baseline_series(b)) {
    for (const auto& [size, f] : *s.figures) sizes.insert(size);
  }
  Json by_size = Json::array();
  for (std::uint64_t size : sizes) {
    Json o;
    o["size_bytes"] = size;
    o["memcpy_1t_gbps"] = json_number(gbps_at(b.memcpy_1t, size));
    o["memcpy_2t_gbps"] = json_number(gbps_at(b.memcpy_2t, size));
    o["tcp_raw_gbps"] = json_number(gbps_at(b.tcp_raw, size));
    o["file_gbps"] = json_number(gbps_at(b.file, size));
    o["file_fsync_gbps"] = json_number(gbps_at(b.file_fsync, size));
    Json u = Json::object();
    for (const auto& [tls, figures] : b.ucx_perftest) u[tls] = json_number(gbps_at(figures, size));
    o["ucx_perftest_gbps"] = std::move(u);
    by_size.push_back(std::move(o));
  }
  base["by_size"] = std::move(by_size);

  Json notes = Json::object();
  if (!b.iperf3.note.empty()) notes["iperf3"] = b.iperf3.note;
  for (const NamedSeries& s : baseline_series(b)) {
    const std::string note = series_note(*s.figures);
    if (!note.empty()) notes[s.key] = note;
  }
  base["notes"] = std::move(notes);
  j["baselines"] = std::move(base);

  Json targets = Json::array();
  for (const TargetCheck& c : checks) {
    targets.push_back(Json{{"name", c.name},
                           {"target", c.target},
                           {"measured", c.measured},
                           {"verdict", c.verdict},
                           {"note", c.note}});
  }
  j["targets"] = std::move(targets);
  return j;
}

// ---------------------------------------------------------------------------
// gnuplot.

// A temporary file from mkstemp, removed when this goes out of scope.
class TempFile {
 public:
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  bool create(const std::string& stem, std::string* error) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + stem + "-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    const int fd = ::mkstemp(buf.data());
    if (fd < 0) {
      const int err = errno;
      if (error)
        *error = fmt::format("cannot create a temporary file {}: {} (set TMPDIR to a writable directory)",
                             templ, errno_text(err));
      return false;
    }
    ::close(fd);
    path_ = buf.data();
    return true;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string dirs = path;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

// A word for /bin/sh.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A gnuplot single-quoted string (a quote is doubled; no escapes are interpreted).
std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    if (c == '\n' || c == '\r') c = ' ';
    out += c;
  }
  return out + "'";
}

bool exited_ok(int status) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// pngcairo when this gnuplot has it (checked once), else png.
const char* png_terminal() {
  static const char* const kTerminal =
      exited_ok(std::system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1")) ? "pngcairo" : "png";
  return kTerminal;
}

std::string read_tail(const std::string& path, std::size_t max) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  std::string out;  // one line, runs of blanks collapsed
  for (char c : one_line(text)) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > max) out = "..." + out.substr(out.size() - max);
  return out;
}

struct PlotSeries {
  std::string title;
  std::string style;  // gnuplot "with ..." clause
  std::vector<std::pair<double, double>> points;
};

// Colour per (transport, detail), stable across runs: fixed ones for the usual
// rows, then a cycle.
std::string series_color(const std::string& key, std::map<std::string, std::string>* assigned) {
  static const char* const kFixed[][2] = {{"tcp", "#1f77b4"},
                                          {"shm", "#2ca02c"},
                                          {"ucx posix,self", "#d62728"},
                                          {"ucx tcp,self", "#9467bd"},
                                          {"verbs", "#ff7f0e"}};
  static const char* const kCycle[] = {"#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#1a55a0"};
  const auto it = assigned->find(key);
  if (it != assigned->end()) return it->second;
  std::string color;
  for (const auto& f : kFixed) {
    if (key == f[0]) color = f[1];
  }
  if (color.empty()) {
    std::size_t used = 0;
    for (const auto& [k, c] : *assigned) {
      bool fixed = false;
      for (const auto& f : kFixed) fixed = fixed || k == f[0];
      if (!fixed) ++used;
    }
    color = kCycle[used % (sizeof kCycle / sizeof kCycle[0])];
  }
  (*assigned)[key] = color;
  return color;
}

std::vector<PlotSeries> plot_series(const BenchReport& report, std::set<std::uint64_t>* sizes) {
  std::vector<PlotSeries> out;
  std::map<std::string, std::string> colors;
  const auto rows = sorted_records(report);
  for (const CellRecord* r : rows) sizes->insert(r->size_bytes);

  // Measured: one series per (transport, detail, readers); readers > 1 dotted
  // with open points in the colour of the same transport's 1-reader series.
  std::map<std::pair<std::string, int>, std::size_t> index;
  std::vector<std::string> order;
  for (const CellRecord* r : rows) {
    if (!r->error.empty() || !finite(r->gbps_median) || r->size_bytes == 0) continue;
    const std::string key = label(*r);
    const auto k = std::make_pair(key, r->readers);
    if (index.find(k) == index.end()) {
      PlotSeries s;
      const std::string color = series_color(key, &colors);
      if (r->readers == 1) {
        s.title = key;
        s.style = fmt::format("linespoints lw 2.5 pt 7 ps 1.2 dt 1 lc rgb '{}'", color);
      } else {
        s.title = fmt::format("{}, {} readers", key, r->readers);
        s.style = fmt::format("linespoints lw 1.5 pt 6 ps 1.2 dt 3 lc rgb '{}'", color);
      }
      index[k] = out.size();
      out.push_back(std::move(s));
    }
    out[index[k]].points.emplace_back(static_cast<double>(r->size_bytes), r->gbps_median);
  }
  // Readers 1 first in the legend, then the multi-reader series.
  std::stable_partition(out.begin(), out.end(),
                        [](const PlotSeries& s) { return s.title.find(" readers") == std::string::npos; });

  // Limits: thin dashed lines without points.
  const Baselines& b = report.baselines;
  const auto limit = [&](const std::string& title, const std::string& style,
                         const std::map<std::uint64_t, BaselineFigure>& figures) {
    PlotSeries s{title, style, {}};
    for (const auto& [size, f] : figures) {
      if (size == 0 || !finite(f.gbps)) continue;
      s.points.emplace_back(static_cast<double>(size), f.gbps);
      sizes->insert(size);
    }
    out.push_back(std::move(s));
  };
  limit("limit: memcpy 1 thread", "lines lw 1.5 dt 2 lc rgb '#000000'", b.memcpy_1t);
  limit("limit: memcpy 2 threads", "lines lw 1.5 dt 4 lc rgb '#555555'", b.memcpy_2t);
  limit("limit: tcp raw", fmt::format("lines lw 1.5 dt 2 lc rgb '{}'", series_color("tcp", &colors)),
        b.tcp_raw);
  for (const auto& [tls, figures] : b.ucx_perftest) {
    limit("limit: ucx_perftest " + tls,
          fmt::format("lines lw 1.5 dt 2 lc rgb '{}'", series_color("ucx " + tls, &colors)), figures);
  }
  limit("limit: checkpoint file (page cache)", "lines lw 1.5 dt 2 lc rgb '#8c564b'", b.file);
  if (finite(b.iperf3.gbps) && !sizes->empty()) {
    PlotSeries s{"limit: iperf3 one stream",
                 fmt::format("lines lw 1.5 dt 3 lc rgb '{}'", series_color("tcp", &colors)),
                 {{static_cast<double>(*sizes->begin()), b.iperf3.gbps},
                  {static_cast<double>(*sizes->rbegin()), b.iperf3.gbps}}};
    out.push_back(std::move(s));
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const PlotSeries& s) { return s.points.empty(); }),
            out.end());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------

std::string format_size(std::uint64_t bytes) {
  try {
    static const struct {
      std::uint64_t unit;
      const char* name;
    } kUnits[] = {{kGiB * 1024, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
    for (const auto& u : kUnits) {
      if (bytes < u.unit) continue;
      if (bytes % u.unit == 0) return fmt::format("{} {}", bytes / u.unit, u.name);
      return fmt::format("{:.1f} {}", static_cast<double>(bytes) / static_cast<double>(u.unit), u.name);
    }
    return fmt::format("{} B", bytes);
  } catch (...) {
    return std::to_string(bytes) + " B";
  }
}

void print_table(std::FILE* out, const BenchReport& report) {
  try {
    TextTable table({{"transport", "", true},
                     {"detail", "", true},
                     {"size", "", false},
                     {"readers", "", false},
                     {"reps", "", false},
                     {"GB/s", "median", false},
                     {"GB/s", "p99", false},
                     {"latency", "med ms", false},
                     {"latency", "p99 ms", false},
                     {"commit->all", "med ms", false},
                     {"publish", "med ms", false},
                     {"compute", "slowdown", false},
                     {"CPU s/GB", "publisher", false},
                     {"CPU s/GB", "reader", false},
                     {"limit", "", true},
                     {"ratio", "to limit", false}});
    for (const CellRecord* r : sorted_records(report)) {
      std::vector<std::string> id = {r->transport, r->detail.empty() ? "-" : r->detail,
                                     format_size(r->size_bytes), std::to_string(r->readers)};
      if (!r->error.empty()) {
        table.add(Row{std::move(id), "FAILED: " + r->error});
        continue;
      }
      std::vector<std::string> cells = std::move(id);
      cells.push_back(std::to_string(r->repetitions));
      cells.push_back(gbps_text(r->gbps_median));
      cells.push_back(gbps_text(r->gbps_p99));
      cells.push_back(ms_text(r->latency_s_median));
      cells.push_back(ms_text(r->latency_s_p99));
      cells.push_back(ms_text(r->commit_to_all_s_median));
      cells.push_back(ms_text(r->publish_s_median));
      cells.push_back(finite(r->compute_slowdown) ? fmt::format("{:.1f}%", r->compute_slowdown * 100.0)
                                                  : "-");
      cells.push_back(num(r->publisher_cpu_s_per_gb, "{:.3f}"));
      cells.push_back(num(r->reader_cpu_s_per_gb, "{:.3f}"));
      cells.push_back(r->limit_name.empty() ? "-" : r->limit_name);
      cells.push_back(percent_text(r->ratio_to_limit));
      table.add(Row{std::move(cells), ""});
    }
    const std::vector<std::string> lines = table.render();
    const std::string rule(std::min(kMaxLine, std::max<std::size_t>(widest(lines), 60)), '-');

    fmt::print(out, "weightsync-bench\n");
    fmt::print(out, "  host:         {}\n", report.host);
    fmt::print(out, "  started at:   {}\n", report.started_at);
    fmt::print(out, "  command line: {}\n", one_line(report.command_line));
    fmt::print(out, "  GB = 10^9 bytes; GB/s and latency per reader; ratio to limit = GB/s median / limit\n");
    fmt::print(out, "{}\n", rule);
    print_lines(out, lines);
    fmt::print(out, "{}\n", rule);

    // The limits, against memcpy 1 thread at the same size.
    TextTable limits({{"limit", "", true},
                      {"size", "", false},
                      {"reps", "", false},
                      {"GB/s", "", false},
                      {"vs memcpy", "1 thread", false},
                      {"note", "", true}});
    const Baselines& b = report.baselines;
    const auto add_figure = [&](const std::string& name, const std::string& size_text, std::uint64_t size,
                                const BaselineFigure& f) {
      const double mc = size == 0 ? kNaN : gbps_at(b.memcpy_1t, size);
      const double ratio = finite(f.gbps) && finite(mc) && mc > 0.0 ? f.gbps / mc : kNaN;
      limits.add(Row{{name, size_text, std::to_string(f.repetitions), gbps_text(f.gbps), percent_text(ratio),
                      f.note.empty() ? "" : one_line(f.note)},
                     ""});
    };
    for (const NamedSeries& s : baseline_series(b)) {
      for (const auto& [size, f] : *s.figures) add_figure(s.name, format_size(size), size, f);
      if (s.key == "tcp_raw") add_figure("iperf3 one stream", "-", 0, b.iperf3);  // size-independent
    }
    fmt::print(out, "\nLimits measured in the same run\n");
    std::vector<std::string> limit_lines = limits.render();
    for (std::string& l : limit_lines) l = truncate(l, kMaxLine);
    print_lines(out, limit_lines);
    std::fflush(out);
  } catch (...) {
    // Never throws; a failed write leaves the output cut short.
  }
}

std::vector<TargetCheck> evaluate_targets(const BenchReport& report) {
  std::vector<TargetCheck> checks;
  try {
    check_tcp(report, &checks);
    check_shm(report, &checks);
    check_ucx(report, &checks);
    check_checkpoint(report, &checks);
    check_publish(report, &checks);
  } catch (...) {
    // Out of memory while formatting: return what was evaluated.
  }
  return checks;
}

void print_targets(std::FILE* out, const std::vector<TargetCheck>& checks) {
  try {
    TextTable table({{"name", "", true},
                     {"target", "", true},
                     {"measured", "", true},
                     {"verdict", "", true},
                     {"note", "", true}});
    for (const TargetCheck& c : checks) table.add(Row{{c.name, c.target, c.measured, c.verdict, c.note}, ""});
    std::vector<std::string> lines = table.render();
    for (std::string& l : lines) l = truncate(l, kMaxLine);
    fmt::print(out, "\nPerformance targets (rows >= 64 MiB, 1 reader)\n");
    print_lines(out, lines);
    std::fflush(out);
  } catch (...) {
  }
}

bool write_csv(const std::string& path, const BenchReport& report, std::string* error) {
  try {
    std::string text =
        "transport,detail,size_bytes,readers,repetitions,gbps_median,gbps_p99,latency_s_median,latency_s_p99,"
        "commit_to_all_s_median,commit_to_all_s_p99,publish_s_median,compute_slowdown,publisher_cpu_s_per_gb,"
        "reader_cpu_s_per_gb,memcpy_paired_gbps,limit_name,limit_gbps,limit_spread,ratio_to_limit,error\n";
    for (const CellRecord* r : sorted_records(report)) {
      const std::vector<std::string> fields = {csv_field(r->transport),
                                               csv_field(r->detail),
                                               std::to_string(r->size_bytes),
                                               std::to_string(r->readers),
                                               std::to_string(r->repetitions),
                                               csv_number(r->gbps_median),
                                               csv_number(r->gbps_p99),
                                               csv_number(r->latency_s_median),
                                               csv_number(r->latency_s_p99),
                                               csv_number(r->commit_to_all_s_median),
                                               csv_number(r->commit_to_all_s_p99),
                                               csv_number(r->publish_s_median),
                                               csv_number(r->compute_slowdown),
                                               csv_number(r->publisher_cpu_s_per_gb),
                                               csv_number(r->reader_cpu_s_per_gb),
                                               csv_number(r->memcpy_paired_gbps),
                                               csv_field(r->limit_name),
                                               csv_number(r->limit_gbps),
                                               csv_number(r->limit_spread),
                                               csv_number(r->ratio_to_limit),
                                               csv_field(r->error)};
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (i > 0) text += ',';
        text += fields[i];
      }
      text += '\n';
    }
    return write_text_file(path, text, error);
  } catch (const std::exception& e) {
    if (error) *error = fmt::format("cannot write {}: {}", path, e.what());
    return false;
  } catch (...) {
    if (error) *error = "cannot write " + path + ": unknown error";
    return false;
  }
}

bool write_json(const std::string& path, const BenchReport& report, const std::vector<TargetCheck>& checks,
                std::string* error) {
  try {
    const Json j = build_json(report, checks);
    // Invalid UTF-8 (from a tool's message) is replaced rather than thrown.
    return write_text_file(path, j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n", error);
  } catch (const std::exception& e) {
    if (error) *error = fmt::format("cannot write {}: {}", path, e.what());
    return false;
  } catch (...) {
    if (error) *error = "cannot write " + path + ": unknown error";
    return false;
  }
}

bool write_plot(const std::string& path, const BenchReport& report, std::string* error) {
  try {
    if (!on_path("gnuplot")) {
      if (error) *error = "gnuplot not found: apt-get install gnuplot-nox";
      return false;
    }
    std::set<std::uint64_t> sizes;
    const std::vector<PlotSeries> series = plot_series(report, &sizes);
    bool any_measured = false;
    for (const PlotSeries& s : series) any_measured = any_measured || s.title.rfind("limit: ", 0) != 0;
    if (!any_measured) {
      if (error) *error = "nothing to plot: no row has a GB/s median";
      return false;
    }

    TempFile data, script, log;
    if (!data.create("wsbench-plot-data", error) || !script.create("wsbench-plot-script", error) ||
        !log.create("wsbench-plot-log", error)) {
      return false;
    }
    std::string data_text;
    for (const PlotSeries& s : series) {
      data_text += fmt::format("# {}\n", s.title);
      for (const auto& [x, y] : s.points) data_text += fmt::format("{} {}\n", x, y);
      data_text += "\n\n";
    }
    if (!write_text_file(data.path(), data_text, error)) return false;

    std::string xtics;
    for (std::uint64_t size : sizes) {
      xtics += fmt::format("{}{} {}", xtics.empty() ? "" : ", ", gp_quote(format_size(size)), size);
    }
    std::string gp;
    gp += fmt::format("set terminal {} size 1400,900 noenhanced font ',11'\n", png_terminal());
    gp += fmt::format("set output {}\n", gp_quote(path));
    gp += fmt::format("set title {} font ',14'\n", gp_quote("weightsync-bench on " + report.host));
    gp += "set xlabel 'image size'\nset ylabel 'GB/s per reader (median; GB = 10^9 bytes)'\n";
    gp += "set logscale x 2\n";
    gp += fmt::format("set xtics ({})\nset mxtics 1\n", xtics);
    if (sizes.size() > 1) {
      gp += fmt::format("set xrange [{}:{}]\n", static_cast<double>(*sizes.begin()) / 1.25,
                        static_cast<double>(*sizes.rbegin()) * 1.25);
    }
    gp += "set yrange [0:*]\nset grid xtics ytics lc rgb '#dddddd' lw 1 dt 1\n";
    gp +=
        "set key outside right top vertical Left reverse samplen 4 spacing 1.3 width 1 box lc rgb "
        "'#aaaaaa'\n";
    gp += "set datafile missing '-'\n";
    std::string plot;
    for (std::size_t i = 0; i < series.size(); ++i) {
      plot += fmt::format("{}{} index {} using 1:2 with {} title {}", i == 0 ? "plot " : ", \\\n     ",
                          gp_quote(data.path()), i, series[i].style, gp_quote(series[i].title));
    }
    gp += plot + "\n";
    if (!write_text_file(script.path(), gp, error)) return false;

    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      if (error) *error = fmt::format("cannot replace {}: {}", path, errno_text(err));
      return false;
    }
    const std::string command =
        fmt::format("gnuplot {} >{} 2>&1", shell_quote(script.path()), shell_quote(log.path()));
    const int status = std::system(command.c_str());
    if (!exited_ok(status)) {
      const std::string tail = read_tail(log.path(), 400);
      if (error) {
        *error = fmt::format("gnuplot failed (status {}) drawing {}{}{}", status, path,
                             tail.empty() ? "" : ": ", tail);
      }
      return false;
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || st.st_size == 0) {
      if (error) {
        *error = fmt::format("gnuplot wrote no image to {} (check the directory is writable): {}", path,
                             read_tail(log.path(), 400));
      }
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    if (error) *error = fmt::format("cannot draw {}: {}", path, e.what());
    return false;
  } catch (...) {
    if (error) *error = "cannot draw " + path + ": unknown error";
    return false;
  }
}

}  // namespace wsbench
