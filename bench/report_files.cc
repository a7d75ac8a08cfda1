// The machine-readable outputs: write_csv (one line per host record) and
// write_json (records, baselines, the GPU part, targets;
// nlohmann::ordered_json, NaN -> null).
#include "report.h"

#include <cstdint>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "report_common.h"
#include "report_gpu.h"

namespace wsbench {

using report_detail::baseline_series;
using report_detail::figure_at;
using report_detail::finite;
using report_detail::gbps_at;
using report_detail::NamedSeries;
using report_detail::sorted_records;
using report_detail::write_text_file;

namespace {

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
  j["gpu"] = report_detail::gpu_json(report);

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

// Runs write (which builds the text and writes it) and turns any exception
// into false with "cannot write PATH: why" in *error.
template <typename Write>
bool write_guarded(const std::string& path, std::string* error, Write write) {
  try {
    return write();
  } catch (const std::exception& e) {
    if (error) *error = fmt::format("cannot write {}: {}", path, e.what());
    return false;
  } catch (...) {
    if (error) *error = "cannot write " + path + ": unknown error";
    return false;
  }
}

}  // namespace

bool write_csv(const std::string& path, const BenchReport& report, std::string* error) {
  return write_guarded(path, error, [&] {
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
  });
}

bool write_json(const std::string& path, const BenchReport& report, const std::vector<TargetCheck>& checks,
                std::string* error) {
  return write_guarded(path, error, [&] {
    const Json j = build_json(report, checks);
    // Invalid UTF-8 (from a tool's message) is replaced rather than thrown.
    return write_text_file(path, j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n", error);
  });
}

}  // namespace wsbench
