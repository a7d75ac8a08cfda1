// The fanout bench's plot: time-to-all per size as clustered bars, one bar per
// topology and baseline, with the S/L, ceil(log2(N+1))*S/L and N*S/L lines as
// bars beside them (gnuplot, as weightsync-bench --plot draws its sweep).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "fanout.h"
#include "fanout_topology.h"

namespace wsbench {
namespace {

std::string label(std::uint64_t bytes) {
  if (bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  return std::to_string(bytes) + "B";
}

int log2_ceil(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

}  // namespace

bool fanout_write_plot(const std::string& path, const FanoutReport& r, std::string* error) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    *error = "gnuplot not found: apt-get install gnuplot-nox";
    return false;
  }
  const FanoutConfig& c = r.config;
  std::vector<std::string> series = c.topologies;
  for (const std::string b : {"baseline:stream", "baseline:mpi"}) {
    for (const auto& row : r.rows) {
      if (row.topology == b) {
        series.push_back(b);
        break;
      }
    }
  }
  const double limit = r.iperf3_bytes_per_s > 0 ? r.iperf3_bytes_per_s
                                                : (c.rate == "none" ? -1 : bytes_per_second_of_rate(c.rate));
  const int n = c.subscribers;
  const std::string data = path + ".dat", script = path + ".gp";
  {
    std::ofstream out(data);
    out << "size";
    for (const auto& s : series) out << " \"" << s << "\"";
    out << " \"S/L\" \"ceil(log2(N+1))*S/L\" \"N*S/L\"\n";
    for (std::uint64_t size : c.sizes) {
      out << label(size);
      for (const auto& s : series) {
        double v = -1;
        for (const auto& row : r.rows) {
          if (row.size == size && row.topology == s && row.error.empty()) v = row.time_to_all_s;
        }
        if (v > 0) {
          out << " " << v;
        } else {
          out << " NaN";
        }
      }
      const double floor = limit > 0 ? static_cast<double>(size) / limit : NAN;
      out << " " << floor << " " << floor * log2_ceil(n + 1) << " " << floor * n << "\n";
    }
  }
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 1000,600\n"
       << "set output '" << path << "'\n"
       << "set title 'time until all " << n << " subscribers hold v (median of " << c.runs << "), link "
       << c.rate << " per host'\n"
       << "set ylabel 'seconds'\nset style data histogram\nset style histogram clustered gap 1\n"
       << "set style fill solid 0.8 border -1\nset key outside right\nset grid ytics\nset yrange [0:*]\n"
       << "set datafile missing 'NaN'\n"
       << "plot for [i=2:" << series.size() + 4 << "] '" << data << "' using i:xtic(1) title columnhead(i)\n";
  }
  const std::string command = "gnuplot '" + script + "' >'" + path + ".log' 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream log(path + ".log");
  std::string log_text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ::unlink(data.c_str());
  ::unlink(script.c_str());
  ::unlink((path + ".log").c_str());
  if (status != 0 || ::access(path.c_str(), R_OK) != 0) {
    *error = "gnuplot failed drawing " + path + ": " + log_text;
    return false;
  }
  return true;
}

}  // namespace wsbench
