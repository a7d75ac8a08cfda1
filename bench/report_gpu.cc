// report_gpu.h: the GPU targets and the "gpu" object of the JSON (the GPU
// tables are in report_table.cc, beside TextTable).
#include "report_gpu.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpu_rows.h"
#include "report_common.h"

namespace wsbench {
namespace report_detail {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::uint64_t kTargetMinSize = 64 * kMiB;
constexpr double kGpuTarget = 0.80;

struct GpuTarget {
  const char* mode;  // CellRecord::gpu_mode
  const char* name;  // the check's name ("{}" is the row's transport for staged rows)
};
constexpr GpuTarget kTargets[] = {
    {"publish_from_device", "gpu: publish_from_device vs pinned D2H"},
    {"staged", "gpu: {} staged pull into cuda vs min(host pull, pinned H2D)"},
    {"cuda_ipc", "gpu: cuda_ipc pull into cuda vs D2D"},
};

Json number(double v) {
  return finite(v) ? Json(v) : Json(nullptr);
}

std::string check_name(const GpuTarget& t, const CellRecord& r) {
  return std::string(t.mode) == "staged" ? fmt::format(fmt::runtime(t.name), label(r)) : t.name;
}

TargetCheck not_measured(const std::string& name, const std::string& target, const std::string& note) {
  return TargetCheck{name, target, "-", "not measured", note};
}

TargetCheck check_row(const BenchReport& report, const GpuTarget& t, const CellRecord& r) {
  const std::string name = check_name(t, r), target = fmt::format(">= {:.0f}%", kGpuTarget * 100.0);
  if (!r.not_measured.empty()) return not_measured(name, target, one_line(r.not_measured));
  if (!r.error.empty()) {
    return not_measured(name, target,
                        fmt::format("{} cell failed: {}", format_size(r.size_bytes), one_line(r.error)));
  }
  const GpuLimit limit = gpu_limit_for(report, r);
  if (!finite(r.gbps_median) || !finite(limit.gbps) || limit.gbps <= 0.0) {
    return not_measured(
        name, target,
        finite(r.gbps_median) ? limit.note : format_size(r.size_bytes) + " row has no GB/s median");
  }
  const double ratio = r.gbps_median / limit.gbps;
  const bool met = ratio >= kGpuTarget;
  // A miss is never rounded up onto the passing side.
  const double shown = met ? ratio * 100.0 : std::floor(ratio * 100.0);
  return TargetCheck{name, target,
                     fmt::format("{:.0f}% ({:.2f} vs {:.2f} GB/s, {})", shown, r.gbps_median, limit.gbps,
                                 format_size(r.size_bytes)),
                     met ? "met" : "MISSED", limit.note};
}

// The notes of one limit series: one note if all sizes share it, else per size.
std::string series_note(const std::map<std::uint64_t, BaselineFigure>& figures) {
  std::set<std::string> distinct;
  for (const auto& [size, f] : figures) {
    if (!f.note.empty()) distinct.insert(f.note);
  }
  if (distinct.size() <= 1) return distinct.empty() ? "" : *distinct.begin();
  std::string out;
  for (const auto& [size, f] : figures) {
    if (!f.note.empty()) out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", format_size(size), f.note);
  }
  return out;
}

}  // namespace

void check_gpu(const BenchReport& report, std::vector<TargetCheck>* out) {
  const GpuSection& g = report.gpu;
  const std::string target = fmt::format(">= {:.0f}%", kGpuTarget * 100.0);
  for (const GpuTarget& t : kTargets) {
    bool any = false;
    for (const CellRecord& r : g.records) {
      if (r.gpu_mode != t.mode || r.readers != 1 || r.size_bytes < kTargetMinSize) continue;
      out->push_back(check_row(report, t, r));
      any = true;
    }
    if (any) continue;
    const std::string name =
        std::string(t.mode) == "staged" ? "gpu: staged pull into cuda vs min(host pull, pinned H2D)" : t.name;
    out->push_back(not_measured(
        name, target,
        !g.not_measured.empty() ? one_line(g.not_measured) : fmt::format("no {} row >= 64 MiB", t.mode)));
  }
}

Json gpu_json(const BenchReport& report) {
  const GpuSection& g = report.gpu;
  Json j;
  j["mode"] = g.mode;
  bool measured = false;
  for (const CellRecord& r : g.records) measured = measured || r.not_measured.empty();
  j["measured"] = g.not_measured.empty() && measured;
  j["not_measured"] = g.not_measured.empty() ? Json(nullptr) : Json(g.not_measured);
  j["device"] = g.device.empty() ? Json(nullptr) : Json(g.device);

  Json records = Json::array();
  for (const CellRecord& r : g.records) {
    Json o;
    o["gpu_mode"] = r.gpu_mode;
    o["transport"] = r.transport;
    o["detail"] = r.detail;
    o["size_bytes"] = r.size_bytes;
    o["readers"] = r.readers;
    o["repetitions"] = r.repetitions;
    o["gbps_median"] = number(r.gbps_median);
    o["gbps_p99"] = number(r.gbps_p99);
    o["latency_s_median"] = number(r.latency_s_median);
    o["latency_s_p99"] = number(r.latency_s_p99);
    o["publish_s_median"] = number(r.publish_s_median);
    o["commit_to_all_s_median"] = number(r.commit_to_all_s_median);
    o["reader_cpu_s_per_gb"] = number(r.reader_cpu_s_per_gb);
    o["limit"] = r.limit_name;
    o["limit_gbps"] = number(r.limit_gbps);
    o["ratio_to_limit"] = number(r.ratio_to_limit);
    if (!r.not_measured.empty()) o["not_measured"] = r.not_measured;
    if (!r.error.empty()) o["error"] = r.error;
    records.push_back(std::move(o));
  }
  j["records"] = std::move(records);

  std::set<std::uint64_t> sizes;
  for (const auto* series : {&g.d2h_pinned, &g.h2d_pinned, &g.d2d}) {
    for (const auto& [size, f] : *series) sizes.insert(size);
  }
  Json by_size = Json::array();
  for (std::uint64_t size : sizes) {
    by_size.push_back(Json{{"size_bytes", size},
                           {"d2h_pinned_gbps", number(gbps_at(g.d2h_pinned, size))},
                           {"h2d_pinned_gbps", number(gbps_at(g.h2d_pinned, size))},
                           {"d2d_gbps", number(gbps_at(g.d2d, size))}});
  }
  Json notes = Json::object();
  const std::string d2h = series_note(g.d2h_pinned), h2d = series_note(g.h2d_pinned),
                    d2d = series_note(g.d2d);
  if (!d2h.empty()) notes["d2h_pinned"] = d2h;
  if (!h2d.empty()) notes["h2d_pinned"] = h2d;
  if (!d2d.empty()) notes["d2d"] = d2d;
  j["limits"] = Json{{"by_size", std::move(by_size)}, {"notes", std::move(notes)}};
  return j;
}

}  // namespace report_detail
}  // namespace wsbench
