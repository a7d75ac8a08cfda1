// The fanout bench's figures: per-row medians, the issue's targets, the text
// table and the JSON. GB = 10^9 bytes; times in seconds.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <thread>

#include "fanout.h"
#include "fanout_topology.h"

namespace wsbench {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<double> seconds_since_commit(const FanoutVersion& v) {
  std::vector<double> out;
  for (auto ns : v.held_ns) out.push_back(static_cast<double>(ns - v.commit_ns) * 1e-9);
  return out;
}

std::string label(std::uint64_t bytes) {
  if (bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  return std::to_string(bytes) + "B";
}

std::string row_name(const FanoutRow& row) {
  if (row.topology == "baseline:stream") return "baseline: raw TCP stream h0->h1";
  if (row.topology == "baseline:mpi") return "baseline: MPI_Bcast (Open MPI, tcp)";
  return row.topology;
}

const FanoutRow* find_row(const FanoutReport& r, std::uint64_t size, const std::string& topology) {
  for (const auto& row : r.rows) {
    if (row.size == size && row.topology == topology && row.error.empty() && row.time_to_all_s > 0)
      return &row;
  }
  return nullptr;
}

// L: iperf3's figure, else the nominal rate (said in *source).
double link_limit(const FanoutReport& r, std::string* source) {
  if (r.iperf3_bytes_per_s > 0) {
    *source = "iperf3";
    return r.iperf3_bytes_per_s;
  }
  *source = "nominal --rate (iperf3 not measured)";
  return r.config.rate == "none" ? -1 : bytes_per_second_of_rate(r.config.rate);
}

std::string fmt(double v, const char* format = "%.3f") {
  if (!(v > 0) || !std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

int log2_ceil(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

}  // namespace

double FanoutVersion::time_to_all_s() const {
  auto t = seconds_since_commit(*this);
  return t.empty() ? -1 : *std::max_element(t.begin(), t.end());
}
double FanoutVersion::median_s() const {
  return median_of(seconds_since_commit(*this));
}
double FanoutVersion::min_s() const {
  auto t = seconds_since_commit(*this);
  return t.empty() ? -1 : *std::min_element(t.begin(), t.end());
}

void fanout_summarize(FanoutRow* row) {
  if (!row->versions.empty()) {
    std::vector<double> all, med, min;
    for (const auto& v : row->versions) {
      all.push_back(v.time_to_all_s());
      med.push_back(v.median_s());
      min.push_back(v.min_s());
    }
    row->time_to_all_s = median_of(all);
    row->median_s = median_of(med);
    row->min_s = median_of(min);
  } else if (!row->times_s.empty()) {
    row->time_to_all_s = median_of(row->times_s);
  }
}

void fanout_evaluate_targets(FanoutReport* report) {
  const FanoutConfig& c = report->config;
  const std::uint64_t issue_size = 256ull << 20;
  const std::uint64_t size =
      std::find(c.sizes.begin(), c.sizes.end(), issue_size) != c.sizes.end() ? issue_size : c.sizes.back();
  const double s = static_cast<double>(size);
  std::string source;
  const double limit = link_limit(*report, &source);
  const int n = c.subscribers;
  auto add = [&](const std::string& name, bool conditions, const std::string& wanted, bool measured,
                 bool pass, const std::string& detail) {
    FanoutTarget t;
    t.name = name;
    t.detail = detail;
    if (!measured) {
      t.verdict = "n/a";
    } else if (!conditions) {
      t.verdict = "n/a";
      t.detail += " (not the issue's conditions: " + wanted + ")";
    } else {
      t.verdict = pass ? "PASS" : "MISS";
    }
    report->targets.push_back(t);
  };
  char buf[512];
  {  // tcp pull vs iperf3, two namespaces, unshaped
    const FanoutRow* flat = find_row(*report, size, "flat");
    const bool measured = flat && report->iperf3_bytes_per_s > 0;
    const double rate = measured ? s / flat->time_to_all_s : 0;
    const double ratio = measured ? rate / report->iperf3_bytes_per_s : 0;
    std::snprintf(buf, sizeof(buf), "flat pull of %s: %.3f GB/s vs iperf3 %.3f GB/s = %.2fx (want >= 0.85x)",
                  label(size).c_str(), rate * 1e-9, report->iperf3_bytes_per_s * 1e-9, ratio);
    add("tcp pull >= 0.85x iperf3 across two namespaces, unshaped",
        c.rate == "none" && n == 1 && size == issue_size, "--rate none --subscribers 1 --sizes 256MiB",
        measured, ratio >= 0.85, measured ? buf : "needs the flat topology and the iperf3 baseline");
  }
  const bool issue = c.rate == "1gbit" && n == 8 && size == issue_size;
  const std::string issue_text = "--rate 1gbit --subscribers 8 --sizes 256MiB";
  const double floor = limit > 0 ? s / limit : -1;
  {
    const FanoutRow* chain = find_row(*report, size, "chain");
    const bool measured = chain && floor > 0;
    const double ratio = measured ? chain->time_to_all_s / floor : 0;
    std::snprintf(buf, sizeof(buf), "chain %s: %.3f s vs S/L %.3f s (L from %s) = %.2fx (want <= 1.3x)",
                  label(size).c_str(), measured ? chain->time_to_all_s : 0, floor, source.c_str(), ratio);
    add("chain within 1.3x of S/L", issue, issue_text, measured, ratio <= 1.3,
        measured ? buf : "needs the chain topology and L");
  }
  {
    const FanoutRow* tree = find_row(*report, size, "tree2");
    const double bound = floor * log2_ceil(n + 1);
    const bool measured = tree && floor > 0;
    const double ratio = measured ? tree->time_to_all_s / bound : 0;
    std::snprintf(buf, sizeof(buf),
                  "tree2 %s: %.3f s vs ceil(log2(N+1))*S/L = %d x %.3f s = %.3f s = %.2fx (want <= 1.1x)",
                  label(size).c_str(), measured ? tree->time_to_all_s : 0, log2_ceil(n + 1), floor, bound,
                  ratio);
    add("tree2 within 1.1x of ceil(log2(N+1))*S/L", issue, issue_text, measured, ratio <= 1.1,
        measured ? buf : "needs the tree2 topology and L");
  }
  {
    const FanoutRow* mpi = find_row(*report, size, "baseline:mpi");
    const FanoutRow* best = nullptr;
    for (const auto& t : c.topologies) {
      const FanoutRow* row = find_row(*report, size, t);
      if (row && (!best || row->time_to_all_s < best->time_to_all_s)) best = row;
    }
    const bool measured = mpi && best;
    const double ratio = measured ? best->time_to_all_s / mpi->time_to_all_s : 0;
    std::snprintf(buf, sizeof(buf),
                  "best topology %s at %s: %.3f s vs MPI_Bcast %.3f s = %.2fx (want <= 1.2x)",
                  best ? best->topology.c_str() : "-", label(size).c_str(), best ? best->time_to_all_s : 0,
                  mpi ? mpi->time_to_all_s : 0, ratio);
    add("best topology within 1.2x of MPI_Bcast (or faster)", issue, issue_text, measured, ratio <= 1.2,
        measured ? buf : "needs the mpi baseline and a measured topology");
  }
}

void fanout_print(std::FILE* out, const FanoutReport& r) {
  const FanoutConfig& c = r.config;
  const int n = c.subscribers;
  std::fprintf(out,
               "weightsync-bench fanout: N=%d subscribers (%d hosts), link rate %s per host, transport %s, "
               "R=%d measured versions per row (medians; one warm-up version before them)\n",
               n, n + 1, c.rate.c_str(), c.transport.c_str(), c.runs);
  std::fprintf(out, "machine: %s; every host shares these cores\n", r.machine.c_str());
  std::fprintf(out, "command: %s\n", c.command_line.c_str());
  std::string source;
  const double limit = link_limit(r, &source);
  if (r.iperf3_bytes_per_s > 0) {
    std::fprintf(out, "L = %.3f Gbit/s = %.1f MB/s (%s)\n", r.iperf3_bytes_per_s * 8e-9,
                 r.iperf3_bytes_per_s * 1e-6, r.iperf3_note.c_str());
  } else {
    std::fprintf(out, "L = %s (%s%s%s)\n", limit > 0 ? (fmt(limit * 8e-9) + " Gbit/s").c_str() : "unknown",
                 source.c_str(), r.iperf3_note.empty() ? "" : ": ", r.iperf3_note.c_str());
  }
  std::fprintf(out,
               "time-to-all: last subscriber holding v (bit-exact: version marks checked; a relay: holds v) "
               "- the publisher's commit, CLOCK_MONOTONIC\n\n");
  std::fprintf(out, "%-7s %-38s %13s %9s %12s %7s %11s  %s\n", "size", "row", "time-to-all s", "min t_i s",
               "median t_i s", "x S/L", "x MPI_Bcast", "note");
  for (std::uint64_t size : c.sizes) {
    const double s = static_cast<double>(size);
    const double floor = limit > 0 ? s / limit : -1;
    const FanoutRow* mpi = find_row(r, size, "baseline:mpi");
    for (const auto& row : r.rows) {
      if (row.size != size) continue;
      std::string note = row.error.empty() ? "" : "NOT MEASURED: " + row.error;
      if (note.size() > 200) note = note.substr(0, 200) + "...";
      std::fprintf(
          out, "%-7s %-38s %13s %9s %12s %7s %11s  %s\n", label(size).c_str(), row_name(row).c_str(),
          fmt(row.time_to_all_s).c_str(), fmt(row.min_s).c_str(), fmt(row.median_s).c_str(),
          floor > 0 && row.time_to_all_s > 0 ? fmt(row.time_to_all_s / floor, "%.2f").c_str() : "-",
          mpi && row.time_to_all_s > 0 ? fmt(row.time_to_all_s / mpi->time_to_all_s, "%.2f").c_str() : "-",
          note.c_str());
      if (row.topology == "flat" && c.rate == "none" && r.iperf3_bytes_per_s > 0 && row.time_to_all_s > 0) {
        const double rate = s / row.time_to_all_s;
        std::fprintf(out, "%-7s %-38s %13s %9s %12s %7s %11s  %.3f GB/s vs iperf3 %.3f GB/s = %.2fx\n",
                     label(size).c_str(), "  flat pull rate / iperf3", "", "", "", "", "", rate * 1e-9,
                     r.iperf3_bytes_per_s * 1e-9, rate / r.iperf3_bytes_per_s);
      }
    }
    if (floor > 0) {
      const struct {
        std::string name;
        double factor;
      } lines[] = {{"line: S/L (one pull at L)", 1.0},
                   {"line: ceil(log2(N+1))*S/L (binary tree)", static_cast<double>(log2_ceil(n + 1))},
                   {"line: N*S/L (flat through one link)", static_cast<double>(n)}};
      for (const auto& l : lines) {
        std::fprintf(out, "%-7s %-38s %13s %9s %12s %7s %11s\n", label(size).c_str(), l.name.c_str(),
                     fmt(floor * l.factor).c_str(), "", "", fmt(l.factor, "%.2f").c_str(),
                     mpi ? fmt(floor * l.factor / mpi->time_to_all_s, "%.2f").c_str() : "-");
      }
    }
  }
  std::fprintf(out,
               "\nCPU over each row's measured versions (process user+sys; softirq work may land on any "
               "process or on ksoftirqd):\n");
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  for (const auto& row : r.rows) {
    if (row.cpu.empty() || row.wall_s <= 0) continue;
    double publisher = 0, relays = 0, subscribers = 0;
    for (const auto& p : row.cpu) {
      (p.role == "publisher" ? publisher : p.role == "relay" ? relays : subscribers) += p.cpu_s;
    }
    const double total = publisher + relays + subscribers;
    std::fprintf(out,
                 "  %-7s %-6s: %.1f s CPU over %.1f s = %.0f%% of %.0f cores (publisher %.1f, relays %.1f, "
                 "subscribers %.1f); machine busy %.0f%%\n",
                 label(row.size).c_str(), row.topology.c_str(), total, row.wall_s,
                 100 * total / (row.wall_s * cores), cores, publisher, relays, subscribers,
                 row.machine_busy >= 0 ? 100 * row.machine_busy : -1.0);
  }
  std::fprintf(out, "\nTargets (issue 15):\n");
  for (const auto& t : r.targets)
    std::fprintf(out, "  %-4s %s: %s\n", t.verdict.c_str(), t.name.c_str(), t.detail.c_str());
  std::fprintf(out, "\nCommands run (%zu; total %.1f s):\n", r.commands.size(), r.wall_s);
  std::map<std::string, int> seen;
  for (const auto& cmd : r.commands) {
    if (seen[cmd]++ == 0) std::fprintf(out, "  %s\n", cmd.c_str());
  }
}

bool fanout_write_json(const std::string& path, const FanoutReport& r, std::string* error) {
  using nlohmann::json;
  const FanoutConfig& c = r.config;
  json j;
  j["config"] = {{"subscribers", c.subscribers},
                 {"sizes", c.sizes},
                 {"rate", c.rate},
                 {"relay_chunk", c.relay_chunk},
                 {"topologies", c.topologies},
                 {"runs", c.runs},
                 {"transport", c.transport},
                 {"baselines", c.baselines},
                 {"testbed_script", c.testbed_script},
                 {"command_line", c.command_line}};
  j["machine"] = r.machine;
  j["bed"] = r.bed;
  j["hosts"] = json::array();
  for (const auto& h : r.hosts)
    j["hosts"].push_back({{"index", h.index}, {"namespace", h.ns}, {"address", h.address}});
  j["commands"] = r.commands;
  j["iperf3"] = {{"bytes_per_s", r.iperf3_bytes_per_s}, {"note", r.iperf3_note}};
  j["rows"] = json::array();
  for (const auto& row : r.rows) {
    json jr = {{"size", row.size},
               {"topology", row.topology},
               {"time_to_all_s", row.time_to_all_s},
               {"median_s", row.median_s},
               {"min_s", row.min_s},
               {"runs", row.versions.empty() ? row.times_s.size() : row.versions.size()},
               {"times_s", row.times_s},
               {"wall_s", row.wall_s},
               {"machine_busy", row.machine_busy},
               {"error", row.error},
               {"note", row.note}};
    jr["versions"] = json::array();
    for (const auto& v : row.versions) {
      jr["versions"].push_back({{"version", v.version},
                                {"commit_ns", v.commit_ns},
                                {"held_ns", v.held_ns},
                                {"time_to_all_s", v.time_to_all_s()},
                                {"median_s", v.median_s()},
                                {"min_s", v.min_s()}});
    }
    jr["cpu"] = json::array();
    for (const auto& p : row.cpu)
      jr["cpu"].push_back({{"host", p.host}, {"role", p.role}, {"cpu_s", p.cpu_s}});
    j["rows"].push_back(jr);
  }
  j["targets"] = json::array();
  for (const auto& t : r.targets)
    j["targets"].push_back({{"name", t.name}, {"verdict", t.verdict}, {"detail", t.detail}});
  j["wall_s"] = r.wall_s;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) {
    *error = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace wsbench
