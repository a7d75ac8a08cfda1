// write_plot: two PNGs drawn by gnuplot from temporary data and script files.
// The small multiples: one panel per transport (and per GPU row kind), its
// measured GB/s against image size beside the limits that apply to it, all
// panels on the same axes. The fraction chart: every row's GB/s over its own
// limit, one series per transport and reader count.
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
#include <exception>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "report_common.h"

namespace wsbench {

using report_detail::errno_text;
using report_detail::finite;
using report_detail::label;
using report_detail::one_line;
using report_detail::sorted_records;
using report_detail::write_text_file;

namespace {

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

// ---------------------------------------------------------------------------
// What is drawn.

struct PlotSeries {
  std::string title;  // "" : no key entry
  std::string style;  // gnuplot "with ..." clause
  std::vector<std::pair<double, double>> points;
};

struct Panel {
  std::string title;
  std::vector<PlotSeries> series;
};

// Colour per transport label ("tcp", "ucx posix,self"), stable across runs:
// fixed ones for the usual rows, then a cycle.
std::string series_color(const std::string& key, std::map<std::string, std::string>* assigned) {
  static const char* const kFixed[][2] = {{"tcp", "#1f77b4"},
                                          {"shm", "#2ca02c"},
                                          {"ucx posix,self", "#d62728"},
                                          {"ucx tcp,self", "#9467bd"},
                                          {"verbs", "#ff7f0e"}};
  static const char* const kCycle[] = {"#8c564b", "#e377c2", "#17becf", "#bcbd22", "#1a55a0", "#7f7f7f"};
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

// Measured series: 1 reader solid with filled circles; more readers dashed
// with open points, in the same colour (the n-th reader count > 1 of the
// report gets the n-th dash and point).
std::string measured_style(const std::string& color, int readers, const std::vector<int>& multi) {
  if (readers <= 1) return fmt::format("linespoints lw 2.5 pt 7 ps 1.1 dt 1 lc rgb '{}'", color);
  static const char* const kDash[][2] = {
      {"(8,4)", "6"}, {"(16,6)", "4"}, {"(2,4)", "8"}, {"(10,4,2,4)", "10"}};
  std::size_t rank = 0;
  while (rank < multi.size() && multi[rank] != readers) ++rank;
  const auto& d = kDash[rank % (sizeof kDash / sizeof kDash[0])];
  return fmt::format("linespoints lw 1.6 pt {} ps 1.1 dt {} lc rgb '{}'", d[1], d[0], color);
}

std::string readers_title(int readers) {
  return readers == 1 ? "1 reader" : fmt::format("{} readers", readers);
}

// The limits: black and greys (and the checkpoint file in brown), no points,
// each limit the same style in every panel.
struct LimitStyle {
  const char* key;
  const char* title;
  const char* style;
};
constexpr LimitStyle kLimitStyles[] = {
    {"memcpy_1t", "memcpy 1 thread", "lines lw 2 dt (8,5) lc rgb '#000000'"},
    {"memcpy_2t", "memcpy 2 threads", "lines lw 2 dt (8,5) lc rgb '#8a8a8a'"},
    {"tcp_raw", "raw TCP stream", "lines lw 2 dt (14,4,3,4) lc rgb '#000000'"},
    {"iperf3", "iperf3, 1 stream", "lines lw 2 dt (14,4,3,4) lc rgb '#8a8a8a'"},
    {"ucx_perftest", "ucx_perftest ucp_get", "lines lw 2 dt (3,3) lc rgb '#000000'"},
    {"file", "checkpoint file (to beat)", "lines lw 2 dt (2,5) lc rgb '#a0522d'"},
    {"d2h_pinned", "cudaMemcpy D2H pinned", "lines lw 2 dt (8,5) lc rgb '#000000'"},
    {"h2d_pinned", "cudaMemcpy H2D pinned", "lines lw 2 dt (8,5) lc rgb '#000000'"},
    {"d2d", "cudaMemcpy D2D", "lines lw 2 dt (8,5) lc rgb '#000000'"},
};

const LimitStyle& limit_style(const std::string& key) {
  for (const LimitStyle& s : kLimitStyles) {
    if (key == s.key) return s;
  }
  return kLimitStyles[0];
}

void add_limit(Panel* panel, const std::string& key, const std::map<std::uint64_t, BaselineFigure>& figures,
               const std::string& title_suffix = "") {
  const LimitStyle& ls = limit_style(key);
  PlotSeries s{std::string(ls.title) + title_suffix, ls.style, {}};
  for (const auto& [size, f] : figures) {
    if (size != 0 && finite(f.gbps) && f.gbps > 0) s.points.emplace_back(static_cast<double>(size), f.gbps);
  }
  if (s.points.size() == 1) {  // one size (--quick): a short level around it, as a line needs two points
    const auto [x, y] = s.points.front();
    s.points = {{x / 1.2, y}, {x * 1.2, y}};
  }
  if (!s.points.empty()) panel->series.push_back(std::move(s));
}

// A size-independent limit (iperf3), drawn across the x range.
void add_flat_limit(Panel* panel, const std::string& key, double gbps, double x_lo, double x_hi) {
  if (!finite(gbps) || gbps <= 0) return;
  const LimitStyle& ls = limit_style(key);
  panel->series.push_back(PlotSeries{ls.title, ls.style, {{x_lo, gbps}, {x_hi, gbps}}});
}

bool tls_has(const std::string& tls, const std::vector<std::string>& names) {
  std::size_t start = 0;
  while (start <= tls.size()) {
    std::size_t end = tls.find(',', start);
    if (end == std::string::npos) end = tls.size();
    const std::string item = tls.substr(start, end - start);
    for (const std::string& n : names) {
      if (item == n) return true;
    }
    start = end + 1;
  }
  return false;
}

// The limits a host transport's panel shows (docs/performance.md, "The plots"):
//   tcp        raw TCP stream (what the rows' ratio uses) and iperf3, one stream
//   shm        memcpy 1 thread (the rows' ratio uses the paired memcpy, the same
//              copy taken beside each pull) and memcpy 2 threads
//   ucx TLS    ucx_perftest with the same UCX_TLS (the rows' ratio); with a
//              shared-memory TLS (posix, sysv, cma, knem, xpmem) memcpy 1 and 2
//              threads too; with tcp, raw TCP and iperf3 too
//   verbs      none: the bench measures no RDMA limit (ib_read_bw does)
//   every one  the checkpoint file through the page cache: not a ceiling, the
//              alternative each transport must beat (the ">= 5x file" target)
void add_host_limits(Panel* panel, const std::string& transport, const std::string& detail,
                     const Baselines& b, double x_lo, double x_hi) {
  const bool shared_memory =
      transport == "shm" ||
      (transport == "ucx" && tls_has(detail, {"posix", "sysv", "cma", "knem", "xpmem"}));
  const bool over_tcp = transport == "tcp" || (transport == "ucx" && tls_has(detail, {"tcp"}));
  if (transport == "ucx") {
    const auto it = b.ucx_perftest.find(detail);
    if (it != b.ucx_perftest.end()) add_limit(panel, "ucx_perftest", it->second);
  }
  if (over_tcp) {
    add_limit(panel, "tcp_raw", b.tcp_raw);
    add_flat_limit(panel, "iperf3", b.iperf3.gbps, x_lo, x_hi);
  }
  if (shared_memory) {
    add_limit(panel, "memcpy_1t", b.memcpy_1t);
    add_limit(panel, "memcpy_2t", b.memcpy_2t);
  }
  add_limit(panel, "file", b.file);
}

bool plotted(const CellRecord& r) {
  return r.error.empty() && r.not_measured.empty() && finite(r.gbps_median) && r.gbps_median > 0 &&
         r.size_bytes > 0;
}

// Every size any row or limit has.
std::set<std::uint64_t> all_sizes(const BenchReport& report) {
  std::set<std::uint64_t> sizes;
  for (const CellRecord& r : report.records) {
    if (plotted(r)) sizes.insert(r.size_bytes);
  }
  for (const CellRecord& r : report.gpu.records) {
    if (plotted(r)) sizes.insert(r.size_bytes);
  }
  const Baselines& b = report.baselines;
  for (const auto* m : {&b.memcpy_1t, &b.memcpy_2t, &b.tcp_raw, &b.file}) {
    for (const auto& [size, f] : *m) {
      if (size > 0 && finite(f.gbps)) sizes.insert(size);
    }
  }
  for (const auto& [tls, m] : b.ucx_perftest) {
    for (const auto& [size, f] : m) {
      if (size > 0 && finite(f.gbps)) sizes.insert(size);
    }
  }
  return sizes;
}

std::pair<double, double> x_range(const std::set<std::uint64_t>& sizes) {
  if (sizes.empty()) return {1.0, 2.0};
  const double lo = static_cast<double>(*sizes.begin()), hi = static_cast<double>(*sizes.rbegin());
  if (sizes.size() == 1) return {lo / 2, hi * 2};
  return {lo / 1.3, hi * 1.3};
}

// The GPU row kinds, in the order of their panels and of their series in the
// fraction chart.
constexpr const char* kGpuModes[] = {"publish_from_device", "staged", "cuda_ipc"};

// A GPU row's series: "GPU publish_from_device", "GPU staged over tcp", "GPU cuda_ipc".
std::string gpu_key(const CellRecord& r) {
  return r.gpu_mode == "staged" ? "GPU staged over " + label(r) : "GPU " + r.gpu_mode;
}

// The GPU rows to draw, kind by kind (publish_from_device, staged, cuda_ipc),
// each kind in the report's order: the colours of both charts are given in
// this order after the host rows', so a series has the same colour in both.
std::vector<const CellRecord*> gpu_rows_in_order(const BenchReport& report) {
  std::vector<const CellRecord*> out;
  for (const char* mode : kGpuModes) {
    for (const CellRecord& r : report.gpu.records) {
      if (r.gpu_mode == mode && plotted(r)) out.push_back(&r);
    }
  }
  return out;
}

// The colour of every series of both charts: host labels in the table's
// order, then the GPU series.
std::map<std::string, std::string> assign_colors(const BenchReport& report) {
  std::map<std::string, std::string> colors;
  for (const CellRecord* r : sorted_records(report)) {
    if (plotted(*r)) series_color(label(*r), &colors);
  }
  for (const CellRecord* r : gpu_rows_in_order(report)) series_color(gpu_key(*r), &colors);
  return colors;
}

// One panel per host transport label, in the table's order, then one per GPU
// row kind (publish_from_device, staged, cuda_ipc) that has a measured row.
std::vector<Panel> build_panels(const BenchReport& report, double x_lo, double x_hi) {
  std::vector<Panel> panels;
  std::map<std::string, std::string> colors = assign_colors(report);
  std::vector<int> multi;  // the reader counts > 1, ascending
  for (const CellRecord& r : report.records) {
    if (r.readers > 1 && std::find(multi.begin(), multi.end(), r.readers) == multi.end()) {
      multi.push_back(r.readers);
    }
  }
  std::sort(multi.begin(), multi.end());

  std::map<std::string, std::size_t> panel_of;
  std::map<std::pair<std::string, int>, std::size_t> series_of;
  std::vector<std::pair<std::string, std::string>> transport_detail;
  for (const CellRecord* r : sorted_records(report)) {
    if (!plotted(*r)) continue;
    const std::string key = label(*r);
    if (panel_of.find(key) == panel_of.end()) {
      panel_of[key] = panels.size();
      Panel p;
      p.title = r->transport == "ucx" ? fmt::format("ucx, UCX_TLS={}", r->detail) : key;
      if (r->transport == "verbs") p.title += " (no limit measured: see ib_read_bw)";
      panels.push_back(std::move(p));
      transport_detail.emplace_back(r->transport, r->detail);
    }
    Panel& panel = panels[panel_of[key]];
    const auto k = std::make_pair(key, r->readers);
    if (series_of.find(k) == series_of.end()) {
      series_of[k] = panel.series.size();
      panel.series.push_back(PlotSeries{
          readers_title(r->readers), measured_style(series_color(key, &colors), r->readers, multi), {}});
    }
    panel.series[series_of[k]].points.emplace_back(static_cast<double>(r->size_bytes), r->gbps_median);
  }
  for (std::size_t i = 0; i < panels.size(); ++i) {
    // Readers in ascending order in the key, then the limits.
    std::stable_sort(panels[i].series.begin(), panels[i].series.end(),
                     [](const PlotSeries& a, const PlotSeries& b) {
                       return std::atoi(a.title.c_str()) < std::atoi(b.title.c_str());
                     });
    add_host_limits(&panels[i], transport_detail[i].first, transport_detail[i].second, report.baselines, x_lo,
                    x_hi);
  }

  // The GPU rows (1 reader each): one panel per kind, a series per transport
  // for the staged pulls, beside the cudaMemcpy limit of that kind.
  const GpuSection& g = report.gpu;
  struct Kind {
    const char* mode;
    const char* title;
    const char* limit;
    const std::map<std::uint64_t, BaselineFigure>* figures;
  };
  const Kind kinds[] = {
      {"publish_from_device", "GPU: publish_from_device (device -> host slots)", "d2h_pinned", &g.d2h_pinned},
      {"staged", "GPU: staged pulls into device memory", "h2d_pinned", &g.h2d_pinned},
      {"cuda_ipc", "GPU: cuda_ipc (device slots -> device)", "d2d", &g.d2d},
  };
  for (const Kind& kind : kinds) {
    Panel panel{kind.title, {}};
    std::map<std::string, std::size_t> index;
    for (const CellRecord* r : gpu_rows_in_order(report)) {
      if (r->gpu_mode != kind.mode) continue;
      const std::string key = gpu_key(*r);
      if (index.find(key) == index.end()) {
        index[key] = panel.series.size();
        panel.series.push_back(
            PlotSeries{r->gpu_mode == "staged" ? "over " + label(*r) : std::string("1 reader"),
                       measured_style(series_color(key, &colors), 1, multi),
                       {}});
      }
      panel.series[index[key]].points.emplace_back(static_cast<double>(r->size_bytes), r->gbps_median);
    }
    if (panel.series.empty()) continue;
    for (PlotSeries& s : panel.series) std::sort(s.points.begin(), s.points.end());
    add_limit(&panel, kind.limit, *kind.figures);
    panels.push_back(std::move(panel));
  }
  return panels;
}

// The fraction chart's series: each row's GB/s over its own limit (the
// ratio_to_limit of the table: the paired memcpy for shm, the limit measured
// around the row for tcp and ucx, the cudaMemcpy or host-row limit for the
// GPU rows). A series per transport label and reader count.
struct FractionSeries {
  std::string key;    // "tcp", "ucx posix,self", "gpu staged tcp"
  std::string limit;  // the limit's name, for the key
  int readers = 1;
  std::vector<std::pair<double, double>> points;  // size, ratio
};

std::vector<FractionSeries> fraction_series(const BenchReport& report) {
  std::vector<FractionSeries> out;
  std::map<std::pair<std::string, int>, std::size_t> index;
  const auto add = [&](const std::string& key, const CellRecord& r) {
    if (!plotted(r) || !finite(r.ratio_to_limit) || r.ratio_to_limit < 0) return;
    const auto k = std::make_pair(key, r.readers);
    if (index.find(k) == index.end()) {
      index[k] = out.size();
      out.push_back(FractionSeries{key, r.limit_name, r.readers, {}});
    }
    out[index[k]].points.emplace_back(static_cast<double>(r.size_bytes), r.ratio_to_limit);
  };
  for (const CellRecord* r : sorted_records(report)) add(label(*r), *r);
  for (const CellRecord* r : gpu_rows_in_order(report)) add(gpu_key(*r), *r);
  for (FractionSeries& s : out) std::sort(s.points.begin(), s.points.end());
  return out;
}

std::string limit_words(const FractionSeries& s) {
  const std::string& name = s.limit;
  if (s.key.rfind("GPU staged", 0) == 0) return "min(host pull, H2D)";
  if (name == "tcp raw") return "raw TCP stream";
  if (name == "memcpy paired") return "paired memcpy";
  return name.empty() ? "its limit" : name;
}

// ---------------------------------------------------------------------------
// Axes shared by the panels.

// 1-2-5 steps: the largest <= v (down) or the smallest >= v (up).
double step125(double v, bool up) {
  const double decade = std::pow(10.0, std::floor(std::log10(v)));
  const double steps[] = {1, 2, 5, 10};
  if (up) {
    for (double s : steps) {
      if (s * decade >= v * (1 - 1e-9)) return s * decade;
    }
    return 10 * decade;
  }
  for (int i = 3; i >= 0; --i) {
    if (steps[i] * decade <= v * (1 + 1e-9)) return steps[i] * decade;
  }
  return decade;
}

std::string number_text(double v) {
  return fmt::format("{:g}", v);
}

std::string xtics_text(const std::set<std::uint64_t>& sizes) {
  std::string xtics;
  for (std::uint64_t size : sizes) {
    xtics += fmt::format("{}{} {}", xtics.empty() ? "" : ", ", gp_quote(format_size(size)), size);
  }
  return xtics;
}

// ---------------------------------------------------------------------------
// Running gnuplot.

// Writes `data` and `script` (whose "@DATA@" is replaced by the data file's
// name) to temporary files and runs gnuplot on them to draw `path`.
bool run_gnuplot(const std::string& path, const std::string& data_text, const std::string& script_text,
                 std::string* error) {
  TempFile data, script, log;
  if (!data.create("wsbench-plot-data", error) || !script.create("wsbench-plot-script", error) ||
      !log.create("wsbench-plot-log", error)) {
    return false;
  }
  if (!write_text_file(data.path(), data_text, error)) return false;
  std::string gp = script_text;
  const std::string marker = "@DATA@", quoted = gp_quote(data.path());
  for (std::size_t at = gp.find(marker); at != std::string::npos; at = gp.find(marker, at + quoted.size())) {
    gp.replace(at, marker.size(), quoted);
  }
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
}

// Appends a data block for `points` and returns its gnuplot index.
int add_block(std::string* data, int* blocks, const std::string& name,
              const std::vector<std::pair<double, double>>& points) {
  *data += fmt::format("# {}\n", one_line(name));
  for (const auto& [x, y] : points) *data += fmt::format("{} {}\n", x, y);
  *data += "\n\n";
  return (*blocks)++;
}

// Pixel layout of one panel of the small multiples.
constexpr int kPanelW = 560, kPanelH = 420, kHeaderH = 84, kMinWidth = 1300;
constexpr int kLeft = 72, kRight = 18, kTop = 34, kPlotH = 240, kKeyGap = 58;

bool draw_panels(const std::string& path, const BenchReport& report, std::string* error) {
  const std::set<std::uint64_t> sizes = all_sizes(report);
  const auto [x_lo, x_hi] = x_range(sizes);
  const std::vector<Panel> panels = build_panels(report, x_lo, x_hi);
  if (panels.empty()) {
    if (error) *error = "nothing to plot: no row has a GB/s median";
    return false;
  }
  double y_min = 0, y_max = 0;
  for (const Panel& p : panels) {
    for (const PlotSeries& s : p.series) {
      for (const auto& [x, y] : s.points) {
        if (!(y > 0)) continue;
        y_min = y_min == 0 ? y : std::min(y_min, y);
        y_max = std::max(y_max, y);
      }
    }
  }
  y_min = step125(y_min * 0.9, false);
  y_max = step125(y_max * 1.1, true);
  if (y_max <= y_min) y_max = step125(y_min * 1.01, true);
  std::string ytics;
  const bool fine_tics = std::log10(y_max / y_min) <= 4.5;
  for (double decade = std::pow(10.0, std::floor(std::log10(y_min))); decade <= y_max * 1.0001;
       decade *= 10) {
    for (double s : {1.0, 2.0, 5.0}) {
      const double v = s * decade;
      if (v < y_min * 0.9999 || v > y_max * 1.0001 || (!fine_tics && s != 1.0)) continue;
      ytics += fmt::format("{}{} {}", ytics.empty() ? "" : ", ", gp_quote(number_text(v)), v);
    }
  }

  const int n = static_cast<int>(panels.size());
  const int cols = n <= 1 ? 1 : n <= 4 ? 2 : 3;
  const int rows = (n + cols - 1) / cols;
  const int panel_w = std::max(kPanelW, kMinWidth / cols);  // room for the header's lines
  const int width = cols * panel_w, height = kHeaderH + rows * kPanelH;
  const auto sx = [&](double px) { return px / width; };
  const auto sy = [&](double py) { return 1.0 - py / height; };  // py from the top

  std::string data;
  int blocks = 0;
  std::string gp;
  gp += fmt::format("set terminal {} size {},{} noenhanced font ',10'\n", png_terminal(), width, height);
  gp += fmt::format("set output {}\n", gp_quote(path));
  gp += "set logscale x 2\nset logscale y 10\n";
  gp += fmt::format("set xtics ({}) font ',9'\nset mxtics 1\n", xtics_text(sizes));
  gp += fmt::format("set ytics ({})\nset mytics 1\n", ytics);
  gp += fmt::format("set xrange [{}:{}]\nset yrange [{}:{}]\n", x_lo, x_hi, y_min, y_max);
  gp += "set grid xtics ytics lc rgb '#e0e0e0' lw 1 dt 1\nset border lc rgb '#444444'\n";
  gp += "set xlabel 'image size' offset 0,0.3\nset ylabel 'GB/s per reader (median)' offset 1,0\n";
  const std::string when = report.started_at.empty() ? "" : ", " + report.started_at;
  gp += fmt::format("set label 1 {} at screen 0.5,{} center font ',14'\n",
                    gp_quote("weightsync-bench on " + report.host + when +
                             ": pull GB/s against image size, beside the limits measured in the same run"),
                    sy(24));
  gp +=
      fmt::format("set label 2 {} at screen 0.5,{} center font ',10' tc rgb '#444444'\n",
                  gp_quote("In colour, with points: measured, GB/s per reader (solid: 1 reader; dashed, open "
                           "points: more readers). Black and grey, no points: the limits that apply."),
                  sy(48));
  gp += fmt::format("set label 3 {} at screen 0.5,{} center font ',10' tc rgb '#444444'\n",
                    gp_quote("Brown dotted: the checkpoint file, the alternative to beat. GB = 10^9 bytes. "
                             "Log y: the gap between a line and a limit is their ratio."),
                    sy(64));
  gp += "set multiplot\n";
  for (int i = 0; i < n; ++i) {
    const Panel& p = panels[static_cast<std::size_t>(i)];
    const int col = i % cols, row = i / cols;
    const double x0 = col * panel_w, y0 = kHeaderH + row * kPanelH;
    gp += fmt::format("set lmargin at screen {}\nset rmargin at screen {}\n", sx(x0 + kLeft),
                      sx(x0 + panel_w - kRight));
    gp += fmt::format("set tmargin at screen {}\nset bmargin at screen {}\n", sy(y0 + kTop),
                      sy(y0 + kTop + kPlotH));
    gp += fmt::format("set title {} font ',12' offset 0,-0.4\n", gp_quote(p.title));
    gp += fmt::format(
        "set key at screen {},{} left top Left reverse vertical maxrows {} samplen 3.5 spacing 1.15 width -2 "
        "noautotitle\n",
        sx(x0 + kLeft - 10), sy(y0 + kTop + kPlotH + kKeyGap), (p.series.size() + 1) / 2);
    if (i > 0) gp += "unset label 1\nunset label 2\nunset label 3\n";
    std::string plot;
    for (const PlotSeries& s : p.series) {
      const int block = add_block(&data, &blocks, p.title + ": " + s.title, s.points);
      plot += fmt::format("{}@DATA@ index {} using 1:2 with {} title {}",
                          plot.empty() ? "plot " : ", \\\n     ", block, s.style, gp_quote(s.title));
    }
    gp += plot + "\n";
  }
  gp += "unset multiplot\n";
  return run_gnuplot(path, data, gp, error);
}

bool draw_fraction(const std::string& path, const BenchReport& report, std::string* error) {
  constexpr double kTopY = 1.2;
  const std::set<std::uint64_t> sizes = all_sizes(report);
  const auto [x_lo, x_hi] = x_range(sizes);
  const std::vector<FractionSeries> series = fraction_series(report);
  std::vector<int> multi;
  for (const FractionSeries& s : series) {
    if (s.readers > 1 && std::find(multi.begin(), multi.end(), s.readers) == multi.end())
      multi.push_back(s.readers);
  }
  std::sort(multi.begin(), multi.end());
  std::map<std::string, std::string> colors = assign_colors(report);  // as in the panels

  // Two panels side by side when there are rows with more readers (1 reader;
  // more readers), else one; the key on the right.
  const int panels = multi.empty() ? 1 : 2;
  constexpr int kW = 640, kH = 490, kKeyW = 400, kHead = 60, kL = 70, kR = 20, kB = 60;
  const int width = panels * kW + kKeyW, height = kHead + kH;
  const auto sx = [&](double px) { return px / width; };
  const auto sy = [&](double py) { return 1.0 - py / height; };

  std::string data;
  int blocks = 0;
  std::string gp;
  gp += fmt::format("set terminal {} size {},{} noenhanced font ',10'\n", png_terminal(), width, height);
  gp += fmt::format("set output {}\n", gp_quote(path));
  const std::string when = report.started_at.empty() ? "" : ", " + report.started_at;
  gp += fmt::format("set label 1 {} at screen 0.5,{} center font ',14'\n",
                    gp_quote("weightsync-bench on " + report.host + when +
                             ": each row's GB/s as a fraction of its own limit"),
                    sy(22));
  gp += fmt::format(
      "set label 2 {} at screen 0.5,{} center font ',10' tc rgb '#444444'\n",
      gp_quote(std::string("1.0: at the limit. The limit is the row's own: the paired memcpy for "
                           "shm, measured just before, during and after the row for tcp and ucx") +
               (gpu_rows_in_order(report).empty() ? "." : "; the same run's cudaMemcpy for the GPU rows.")),
      sy(42));
  gp += "set logscale x 2\n";
  gp += fmt::format("set xtics ({}) font ',9'\nset mxtics 1\n", xtics_text(sizes));
  gp += fmt::format("set xrange [{}:{}]\nset yrange [0:{}]\n", x_lo, x_hi, kTopY);
  gp += "set ytics 0,0.2,1.2 format '%.1f'\nset mytics 2\n";
  gp += "set grid xtics ytics mytics lc rgb '#e0e0e0' lw 1 dt 1\nset border lc rgb '#444444'\n";
  gp += "set xlabel 'image size' offset 0,0.3\nset ylabel 'GB/s per reader / limit (median)' offset 1,0\n";
  gp += "set multiplot\n";

  int label_id = 10;
  for (int panel = 0; panel < panels; ++panel) {
    const double x0 = panel * kW;
    gp += fmt::format("set lmargin at screen {}\nset rmargin at screen {}\n", sx(x0 + kL), sx(x0 + kW - kR));
    gp += fmt::format("set tmargin at screen {}\nset bmargin at screen {}\n", sy(kHead + 50),
                      sy(kHead + kH - kB));
    gp += fmt::format("set title {} font ',12' offset 0,0.6\n",
                      gp_quote(panel == 0 ? "1 reader" : "more readers (each reader's GB/s / the limit)"));
    if (panel == 0) {
      gp += fmt::format(
          "set key at screen {},{} left top Left reverse vertical samplen 3.5 spacing 1.25 width 1 box lc "
          "rgb "
          "'#bbbbbb' title 'transport / its limit'\n",
          sx(panels * kW + 5), sy(kHead + 50));
    } else {
      gp += "unset label 1\nunset label 2\n";
      gp += fmt::format(
          "set key at screen {},{} left top Left reverse vertical samplen 3.5 spacing 1.25 width 1 box lc "
          "rgb "
          "'#bbbbbb' title 'readers'\n",
          sx(panels * kW + 5), sy(kHead + 50 + 210));
    }
    std::string plot;
    const auto add = [&](const std::string& block_name, const std::vector<std::pair<double, double>>& points,
                         const std::string& style, const std::string& title) {
      const int block = add_block(&data, &blocks, block_name, points);
      plot += fmt::format("{}@DATA@ index {} using 1:2 with {} {}", plot.empty() ? "plot " : ", \\\n     ",
                          block, style, title.empty() ? "notitle" : "title " + gp_quote(title));
    };
    add("at the limit", {{x_lo, 1.0}, {x_hi, 1.0}}, "lines lw 2 dt 1 lc rgb '#000000'",
        panel == 0 ? "1.0: at the limit" : "");
    std::vector<std::pair<double, double>> clipped;
    for (const FractionSeries& s : series) {
      if ((s.readers <= 1) != (panel == 0)) continue;
      std::vector<std::pair<double, double>> points = s.points;
      const std::string color = series_color(s.key, &colors);
      for (auto& [x, y] : points) {
        if (y <= kTopY) continue;
        clipped.emplace_back(x, kTopY);
        if (s.readers <= 1 || multi.size() == 1) {
          gp += fmt::format("set label {} {} at first {},{} center offset 0,0.9 font ',9' tc rgb '{}'\n",
                            label_id++, gp_quote(fmt::format("{:.2f}", y)), x, kTopY, color);
        }
        y = kTopY;
      }
      add(s.key + " " + readers_title(s.readers), points, measured_style(color, s.readers, multi),
          panel == 0 ? fmt::format("{} / {}", s.key, limit_words(s)) : "");
    }
    if (panel == 1) {
      // Key entries for the reader styles (a point outside the x range draws nothing).
      add("1 reader", {{x_lo / 4, 0.5}}, measured_style("#555555", 1, multi), "1 reader (left)");
      for (int r : multi) {
        add(readers_title(r), {{x_lo / 4, 0.5}}, measured_style("#555555", r, multi), readers_title(r));
      }
    }
    if (!clipped.empty()) {
      add("above the top", clipped, "points pt 9 ps 1.5 lc rgb '#000000'",
          panel == 0 ? fmt::format("above {:.1f} (value above it)", kTopY) : "");
    }
    if (series.empty()) {
      gp +=
          "set label 3 'no row has a ratio to a limit (verbs rows and runs across hosts have none)' at graph "
          "0.5,0.5 center\n";
    }
    gp += plot + "\n";
    for (int id = 10; id < label_id; ++id) gp += fmt::format("unset label {}\n", id);
  }
  gp += "unset multiplot\n";
  return run_gnuplot(path, data, gp, error);
}

}  // namespace

std::string fraction_plot_path(const std::string& plot_path) {
  const std::size_t slash = plot_path.find_last_of('/');
  const std::size_t dot = plot_path.find_last_of('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)) {
    return plot_path.substr(0, dot) + "-fraction" + plot_path.substr(dot);
  }
  return plot_path + "-fraction.png";
}

bool write_plot(const std::string& path, const BenchReport& report, std::string* error) {
  try {
    if (!on_path("gnuplot")) {
      if (error) *error = "gnuplot not found: apt-get install gnuplot-nox";
      return false;
    }
    return draw_panels(path, report, error) && draw_fraction(fraction_plot_path(path), report, error);
  } catch (const std::exception& e) {
    if (error) *error = fmt::format("cannot draw {}: {}", path, e.what());
    return false;
  } catch (...) {
    if (error) *error = "cannot draw " + path + ": unknown error";
    return false;
  }
}

}  // namespace wsbench
