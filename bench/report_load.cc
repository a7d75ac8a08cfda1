// load_report_json: a BenchReport back from the JSON that write_json wrote
// (report_files.cc and report_gpu.cc name the fields), so that
// `weightsync-bench replot` can redraw the charts without measuring again.
// Only what the outputs of report.h need is read back: the records, the
// baselines by size (with the notes), iperf3, and the GPU part. The target
// checks in the file are not read (evaluate_targets recomputes them).
#include "report.h"

#include <cstdint>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace wsbench {
namespace {

using Json = nlohmann::json;

// A JSON number, or NaN for null or a missing key; anything else throws.
double number(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return kNaN;
  if (!it->is_number()) throw std::runtime_error(fmt::format("\"{}\" is not a number", key));
  return it->get<double>();
}

std::string text(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "";
  if (!it->is_string()) throw std::runtime_error(fmt::format("\"{}\" is not a string", key));
  return it->get<std::string>();
}

template <typename T>
T integer(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return T{};
  if (!it->is_number_integer()) throw std::runtime_error(fmt::format("\"{}\" is not a whole number", key));
  return it->get<T>();
}

const Json& member(const Json& object, const char* key) {
  static const Json kEmpty = Json::object();
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return kEmpty;
  if (!it->is_object()) throw std::runtime_error(fmt::format("\"{}\" is not an object", key));
  return *it;
}

const Json& array(const Json& object, const char* key) {
  static const Json kEmpty = Json::array();
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return kEmpty;
  if (!it->is_array()) throw std::runtime_error(fmt::format("\"{}\" is not an array", key));
  return *it;
}

// The fields report_files.cc (host rows) and report_gpu.cc (GPU rows) write.
CellRecord load_record(const Json& o) {
  if (!o.is_object()) throw std::runtime_error("a record is not an object");
  CellRecord r;
  r.transport = text(o, "transport");
  r.detail = text(o, "detail");
  r.size_bytes = integer<std::uint64_t>(o, "size_bytes");
  r.readers = integer<int>(o, "readers");
  r.repetitions = integer<int>(o, "repetitions");
  r.gbps_median = number(o, "gbps_median");
  r.gbps_p99 = number(o, "gbps_p99");
  r.latency_s_median = number(o, "latency_s_median");
  r.latency_s_p99 = number(o, "latency_s_p99");
  r.commit_to_all_s_median = number(o, "commit_to_all_s_median");
  r.commit_to_all_s_p99 = number(o, "commit_to_all_s_p99");
  r.publish_s_median = number(o, "publish_s_median");
  r.compute_slowdown = number(o, "compute_slowdown");
  r.publisher_cpu_s_per_gb = number(o, "publisher_cpu_s_per_gb");
  r.reader_cpu_s_per_gb = number(o, "reader_cpu_s_per_gb");
  r.limit_name = text(o, "limit");
  r.limit_gbps = number(o, "limit_gbps");
  r.limit_spread = number(o, "limit_spread");
  r.memcpy_paired_gbps = number(o, "memcpy_paired_gbps");
  r.ratio_to_limit = number(o, "ratio_to_limit");
  r.error = text(o, "error");
  r.gpu_mode = text(o, "gpu_mode");
  r.not_measured = text(o, "not_measured");
  return r;
}

// One baseline at one size: the figure, and the series' note when the file has one.
void put(std::map<std::uint64_t, BaselineFigure>* series, std::uint64_t size, const Json& row,
         const char* key, const Json& notes, const std::string& note_key) {
  if (row.find(key) == row.end()) return;
  BaselineFigure f;
  f.gbps = number(row, key);
  f.note = text(notes, note_key.c_str());
  (*series)[size] = f;
}

void load_baselines(const Json& base, Baselines* b) {
  const Json& notes = member(base, "notes");
  b->iperf3.gbps = number(base, "iperf3_gbps");
  b->iperf3.note = text(notes, "iperf3");
  for (const Json& row : array(base, "by_size")) {
    if (!row.is_object()) throw std::runtime_error("a baselines.by_size entry is not an object");
    const auto size = integer<std::uint64_t>(row, "size_bytes");
    if (size == 0) continue;
    put(&b->memcpy_1t, size, row, "memcpy_1t_gbps", notes, "memcpy_1t");
    put(&b->memcpy_2t, size, row, "memcpy_2t_gbps", notes, "memcpy_2t");
    put(&b->tcp_raw, size, row, "tcp_raw_gbps", notes, "tcp_raw");
    put(&b->file, size, row, "file_gbps", notes, "file");
    put(&b->file_fsync, size, row, "file_fsync_gbps", notes, "file_fsync");
    const Json& ucx = member(row, "ucx_perftest_gbps");
    for (auto it = ucx.begin(); it != ucx.end(); ++it) {
      put(&b->ucx_perftest[it.key()], size, ucx, it.key().c_str(), notes, "ucx_perftest " + it.key());
    }
  }
}

void load_gpu(const Json& g, GpuSection* gpu) {
  if (g.empty()) return;  // a file from before the GPU rows
  gpu->mode = text(g, "mode");
  if (gpu->mode.empty()) gpu->mode = "auto";
  gpu->not_measured = text(g, "not_measured");
  gpu->device = text(g, "device");
  for (const Json& o : array(g, "records")) gpu->records.push_back(load_record(o));
  const Json& limits = member(g, "limits");
  const Json& notes = member(limits, "notes");
  for (const Json& row : array(limits, "by_size")) {
    if (!row.is_object()) throw std::runtime_error("a gpu.limits.by_size entry is not an object");
    const auto size = integer<std::uint64_t>(row, "size_bytes");
    if (size == 0) continue;
    put(&gpu->d2h_pinned, size, row, "d2h_pinned_gbps", notes, "d2h_pinned");
    put(&gpu->h2d_pinned, size, row, "h2d_pinned_gbps", notes, "h2d_pinned");
    put(&gpu->d2d, size, row, "d2d_gbps", notes, "d2d");
  }
}

}  // namespace

bool load_report_json(const std::string& path, BenchReport* report, std::string* error) {
  try {
    std::ifstream in(path);
    if (!in) {
      if (error) *error = fmt::format("cannot open {} (the JSON a run wrote with --json)", path);
      return false;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    const Json j = Json::parse(buffer.str());
    if (!j.is_object() || j.find("records") == j.end()) {
      throw std::runtime_error("no \"records\": not a weightsync-bench --json file");
    }
    BenchReport r;
    r.host = text(j, "host");
    r.started_at = text(j, "started_at");
    r.command_line = text(j, "command_line");
    r.reference_size = integer<std::uint64_t>(j, "reference_size_bytes");
    for (const Json& o : array(j, "records")) r.records.push_back(load_record(o));
    load_baselines(member(j, "baselines"), &r.baselines);
    load_gpu(member(j, "gpu"), &r.gpu);
    *report = std::move(r);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = fmt::format("cannot read {}: {}", path, e.what());
    return false;
  } catch (...) {
    if (error) *error = fmt::format("cannot read {}: unknown error", path);
    return false;
  }
}

}  // namespace wsbench
