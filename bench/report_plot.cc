// write_plot: GB/s against image size for every row and limit, drawn as a PNG
// by gnuplot from temporary data and script files.
#include "report.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
