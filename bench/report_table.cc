// The text tables of a run: print_table (the results, then the limits measured
// in the same run, then the GPU rows and limits: print_gpu_tables) and
// print_targets, on fixed-width columns (TextTable).
#include "report.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "report_common.h"
#include "report_gpu.h"

namespace wsbench {

using report_detail::baseline_series;
using report_detail::finite;
using report_detail::gbps_at;
using report_detail::gbps_text;
using report_detail::ms_text;
using report_detail::NamedSeries;
using report_detail::num;
using report_detail::one_line;
using report_detail::percent_text;
using report_detail::sorted_records;
using report_detail::truncate;

namespace {

constexpr std::size_t kMaxLine = 200;  // text tables stay within this many columns

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

}  // namespace

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
    report_detail::print_gpu_tables(out, report);
    std::fflush(out);
  } catch (...) {
    // Never throws; a failed write leaves the output cut short.
  }
}

namespace report_detail {

void print_gpu_tables(std::FILE* out, const BenchReport& report) {
  const GpuSection& g = report.gpu;
  if (g.records.empty() && g.not_measured.empty()) return;
  fmt::print(out, "\nGPU rows (--gpu {}), 1 reader; ratio = GB/s median / limit\n", g.mode);
  if (!g.not_measured.empty()) {
    fmt::print(out, "  not measured: {}\n", one_line(g.not_measured));
  } else {
    fmt::print(out, "  device: {}\n", one_line(g.device));
  }
  fmt::print(out,
             "  publish_from_device: size / (enqueue to commit) into host slots; staged: a pull over the "
             "transport into cudaMalloc memory; cuda_ipc: device slots into cudaMalloc memory\n");
  TextTable rows({{"row", "", true},
                  {"transport", "", true},
                  {"detail", "", true},
                  {"size", "", false},
                  {"reps", "", false},
                  {"GB/s", "median", false},
                  {"GB/s", "p99", false},
                  {"latency", "med ms", false},
                  {"latency", "p99 ms", false},
                  {"limit", "", true},
                  {"limit", "GB/s", false},
                  {"ratio", "to limit", false}});
  for (const CellRecord& r : g.records) {
    std::vector<std::string> cells = {r.gpu_mode, r.transport, r.detail.empty() ? "-" : r.detail,
                                      format_size(r.size_bytes)};
    if (!r.not_measured.empty()) {
      rows.add(Row{std::move(cells), "not measured"});
      continue;
    }
    if (!r.error.empty()) {
      rows.add(Row{std::move(cells), "FAILED: " + r.error});
      continue;
    }
    cells.push_back(std::to_string(r.repetitions));
    cells.push_back(gbps_text(r.gbps_median));
    cells.push_back(gbps_text(r.gbps_p99));
    cells.push_back(ms_text(r.latency_s_median));
    cells.push_back(ms_text(r.latency_s_p99));
    cells.push_back(r.limit_name.empty() ? "-" : r.limit_name);
    cells.push_back(gbps_text(r.limit_gbps));
    cells.push_back(percent_text(r.ratio_to_limit));
    rows.add(Row{std::move(cells), ""});
  }
  print_lines(out, rows.render());

  // The limits, one line per size.
  TextTable limits({{"GPU limit", "", true},
                    {"size", "", false},
                    {"reps", "", false},
                    {"GB/s", "", false},
                    {"note", "", true}});
  const std::vector<std::pair<std::string, const std::map<std::uint64_t, BaselineFigure>*>> series = {
      {"cudaMemcpy D2H, device -> pinned host", &g.d2h_pinned},
      {"cudaMemcpy H2D, pinned host -> device", &g.h2d_pinned},
      {"cudaMemcpy D2D, device -> device", &g.d2d}};
  for (const auto& [name, figures] : series) {
    for (const auto& [size, f] : *figures) {
      limits.add(Row{{name, format_size(size), std::to_string(f.repetitions), gbps_text(f.gbps),
                      f.note.empty() ? "" : one_line(f.note)},
                     ""});
    }
  }
  fmt::print(out, "\nGPU limits measured in the same run (median; cudaHostAlloc / cudaMalloc buffers)\n");
  std::vector<std::string> lines = limits.render();
  for (std::string& l : lines) l = truncate(l, kMaxLine);
  print_lines(out, lines);
}

}  // namespace report_detail

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

}  // namespace wsbench
