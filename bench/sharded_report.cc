// The table and the JSON file of `weightsync-bench sharded` (sharded_report.h).
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "sharded_report.h"

namespace wsbench {
namespace {

using Json = nlohmann::json;

Json number(double x) {
  return std::isfinite(x) ? Json(x) : Json(nullptr);
}

std::string pieces_text(const ShardedRow& row) {
  std::string out;
  for (const auto& p : row.pieces) out += (out.empty() ? "" : " ") + p;
  return out;
}

}  // namespace

void print_sharded_table(std::FILE* out, const ShardedReport& report) {
  const ShardedConfig& c = report.config;
  std::fprintf(
      out,
      "Sharded sync, %.0f MiB in all, medians of %d runs per row (a run: start signal -> last reader's "
      "pull() returned; GB = 10^9 bytes)\n",
      static_cast<double>(c.model.total_bytes) / (1 << 20), c.runs);
  std::fprintf(out, "%-9s %-12s %9s %8s %19s %13s %11s  %s\n", "transport", "row", "seconds", "GB/s",
               "min..max s", "reader pull s", "reader CPU", "pieces per reader (per trainer rank)");
  for (const auto& t : report.transports) {
    if (!t.error.empty()) {
      std::fprintf(out, "%-9s FAILED: %s\n", t.transport.c_str(), t.error.c_str());
      continue;
    }
    for (const auto& row : t.rows) {
      const std::string name = row.name + " " + row.label;
      std::fprintf(out, "%-9s %-12s %9.4f %8.2f %9.4f..%-9.4f %13.4f %10.3fs  %s\n", t.transport.c_str(),
                   name.c_str(), row.seconds_median, row.gbps_median, row.seconds_min, row.seconds_max,
                   row.reader_pull_s_median, row.reader_cpu_s_median, pieces_text(row).c_str());
    }
    std::fprintf(out,
                 "%-9s sharded/single: %.2fx (median of per-run pairs %.2fx), target >= %.2fx: %s; meanwhile "
                 "other processes %.2f cores, kernel threads %.2f, steal %.2f\n",
                 t.transport.c_str(), t.ratio, t.paired_ratio, c.target, t.verdict.c_str(), t.other_cpu_cores,
                 t.kernel_thread_cores, t.steal_cores);
  }
}

bool write_sharded_json(const std::string& path, const ShardedReport& report, std::string* error) {
  try {
    const ShardedConfig& c = report.config;
    Json j;
    j["bench"] = "sharded";
    j["host"] = report.host;
    j["machine"] = report.machine;
    j["started_at"] = report.started_at;
    j["command_line"] = report.command_line;
    j["loadavg_start"] = report.loadavg_start;
    j["loadavg_end"] = report.loadavg_end;
    j["wall_s"] = report.wall_s;
    j["config"] = Json{{"ranks", c.ranks},
                       {"readers", c.readers},
                       {"total_bytes", c.model.total_bytes},
                       {"width", c.model.width},
                       {"matrices", c.model.matrices},
                       {"rows_per_matrix", c.model.rows()},
                       {"runs", c.runs},
                       {"warmup", c.warmup},
                       {"checksum", c.checksum},
                       {"verify", c.verify},
                       {"target_ratio", c.target},
                       {"interleaving", "ABC then CBA per iteration"},
                       {"window",
                        "coordinator CLOCK_MONOTONIC before the first start signal to the last "
                        "reader's CLOCK_MONOTONIC when its pull() returned"}};
    Json transports = Json::array();
    for (const auto& t : report.transports) {
      Json o;
      o["transport"] = t.transport;
      if (!t.error.empty()) o["error"] = t.error;
      o["ratio"] = number(t.ratio);
      o["paired_ratio"] = number(t.paired_ratio);
      o["verdict"] = t.verdict;
      o["other_cpu_cores"] = number(t.other_cpu_cores);
      o["steal_cores"] = number(t.steal_cores);
      o["kernel_thread_cores"] = number(t.kernel_thread_cores);
      o["wall_s"] = t.wall_s;
      Json rows = Json::array();
      for (const auto& row : t.rows) {
        Json r;
        r["name"] = row.name;
        r["label"] = row.label;
        r["publishers"] = row.publishers;
        r["readers"] = row.readers;
        r["bytes"] = row.bytes;
        r["pieces"] = row.pieces;
        r["runs"] = row.samples.size();
        r["seconds_median"] = number(row.seconds_median);
        r["gbps_median"] = number(row.gbps_median);
        r["seconds_min"] = number(row.seconds_min);
        r["seconds_max"] = number(row.seconds_max);
        r["reader_pull_s_median"] = number(row.reader_pull_s_median);
        r["reader_cpu_s_median"] = number(row.reader_cpu_s_median);
        Json samples = Json::array();
        for (const auto& s : row.samples) {
          samples.push_back(Json{{"run", s.run},
                                 {"seconds", s.seconds},
                                 {"gbps", s.gbps},
                                 {"reader_pull_s", s.reader_pull_s},
                                 {"member_s", s.member_s},
                                 {"reader_cpu_s", s.reader_cpu_s},
                                 {"checked_bytes", s.checked_bytes},
                                 {"checksums_verified", s.checksums_verified}});
        }
        r["samples"] = std::move(samples);
        rows.push_back(std::move(r));
      }
      o["rows"] = std::move(rows);
      transports.push_back(std::move(o));
    }
    j["transports"] = std::move(transports);
    std::ofstream file(path);
    if (!file) {
      if (error) *error = "cannot write " + path;
      return false;
    }
    file << j.dump(2) << "\n";
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
