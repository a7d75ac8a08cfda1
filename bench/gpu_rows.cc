// gpu_rows.h: the --gpu decision, the GPU rows of a run and their limits.
#include "gpu_rows.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report.h"

namespace wsbench {
namespace {

const BaselineFigure* at(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size) {
  const auto it = figures.find(size);
  return it == figures.end() ? nullptr : &it->second;
}

bool usable(const BaselineFigure* f) {
  return f != nullptr && std::isfinite(f->gbps) && f->gbps > 0.0;
}

std::string label(const std::string& transport, const std::string& detail) {
  return detail.empty() ? transport : transport + " " + detail;
}

// Why a limit figure is missing at `size`.
std::string missing(const BaselineFigure* f, const std::string& what, std::uint64_t size) {
  if (f == nullptr) return fmt::format("no {} figure at {}", what, format_size(size));
  if (!f->note.empty()) return what + ": " + f->note;
  return fmt::format("{} not measured at {}", what, format_size(size));
}

GpuLimit single(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size,
                const std::string& name, const std::string& how) {
  GpuLimit limit;
  const BaselineFigure* f = at(figures, size);
  if (!usable(f)) {
    limit.note = missing(f, name, size);
    return limit;
  }
  limit.gbps = f->gbps;
  limit.name = name;
  limit.note = how;
  return limit;
}

// The transport's own figure for a staged row: its host-destination row in
// this run (1 reader, same size), else the limit that row is compared with.
GpuLimit transport_figure(const BenchReport& report, const CellRecord& row) {
  const std::string what = label(row.transport, row.detail);
  GpuLimit out;
  for (const CellRecord& host : report.records) {
    if (host.transport != row.transport || host.detail != row.detail || host.size_bytes != row.size_bytes ||
        host.readers != 1 || !host.error.empty() || !std::isfinite(host.gbps_median) ||
        host.gbps_median <= 0.0) {
      continue;
    }
    out.gbps = host.gbps_median;
    out.name = what + " host pull";
    return out;
  }
  const Baselines& b = report.baselines;
  const BaselineFigure* f = nullptr;
  std::string name;
  if (row.transport == "tcp") {
    f = at(b.tcp_raw, row.size_bytes);
    name = "tcp raw";
  } else if (row.transport == "shm") {
    f = at(b.memcpy_1t, row.size_bytes);
    name = "memcpy 1 thread";
  } else if (row.transport == "ucx") {
    const auto it = b.ucx_perftest.find(row.detail);
    if (it != b.ucx_perftest.end()) f = at(it->second, row.size_bytes);
    name = "ucx_perftest " + row.detail;
  }
  if (usable(f)) {
    out.gbps = f->gbps;
    out.name = name;
    out.note = "no " + what + " host row at this size: its limit instead";
    return out;
  }
  out.note = "no " + what + " host row or limit at " + format_size(row.size_bytes);
  return out;
}

}  // namespace

bool parse_gpu_flag(const std::string& text, GpuFlag* flag) {
  if (text == "auto") {
    *flag = GpuFlag::kAuto;
  } else if (text == "on") {
    *flag = GpuFlag::kOn;
  } else if (text == "off") {
    *flag = GpuFlag::kOff;
  } else {
    return false;
  }
  return true;
}

const char* gpu_flag_name(GpuFlag flag) {
  switch (flag) {
    case GpuFlag::kAuto: return "auto";
    case GpuFlag::kOn: return "on";
    case GpuFlag::kOff: return "off";
  }
  return "?";
}

GpuDecision decide_gpu(GpuFlag flag, bool usable_device, const std::string& reason, bool bench_built,
                       bool remote) {
  GpuDecision d;
  if (flag == GpuFlag::kOff) {
    d.not_measured = "turned off (--gpu off)";
    return d;
  }
  if (remote) {
    d.not_measured =
        "client mode: the GPU rows need the publisher on this host (run weightsync-bench "
        "without `client`)";
  } else if (!usable_device) {
    d.not_measured = reason.empty() ? "no usable CUDA device" : reason;
  } else if (!bench_built) {
    d.not_measured = "weightsync-bench was built without CUDA (configure with WEIGHTSYNC_WITH_CUDA=ON)";
  } else {
    d.measure = true;
    return d;
  }
  d.fatal = flag == GpuFlag::kOn;
  return d;
}

const char* gpu_row_name(GpuRow row) {
  switch (row) {
    case GpuRow::kNone: return "";
    case GpuRow::kPublishFromDevice: return "publish_from_device";
    case GpuRow::kStagedPull: return "staged";
    case GpuRow::kCudaIpc: return "cuda_ipc";
  }
  return "";
}

std::vector<CellSpec> plan_gpu_cells(const std::vector<TransportSpec>& transports,
                                     const std::vector<std::uint64_t>& sizes) {
  std::vector<CellSpec> cells;
  if (transports.empty()) return cells;
  const TransportSpec* checker = &transports.front();
  for (const char* preferred : {"tcp", "shm"}) {  // shm wins over tcp
    for (const TransportSpec& t : transports) {
      if (t.transport == preferred) checker = &t;
    }
  }
  auto add = [&](const TransportSpec& t, std::uint64_t size, GpuRow row) {
    CellSpec spec;
    spec.transport = t;
    spec.size = size;
    spec.readers = 1;
    spec.compute_rounds = 0;
    spec.gpu = row;
    cells.push_back(spec);
  };
  for (std::uint64_t size : sizes) add(*checker, size, GpuRow::kPublishFromDevice);
  for (const TransportSpec& t : transports) {
    for (std::uint64_t size : sizes) add(t, size, GpuRow::kStagedPull);
  }
  for (std::uint64_t size : sizes) add(TransportSpec{"cuda_ipc", ""}, size, GpuRow::kCudaIpc);
  return cells;
}

GpuLimit gpu_limit_for(const BenchReport& report, const CellRecord& row) {
  const GpuSection& g = report.gpu;
  if (row.gpu_mode == "publish_from_device") {
    return single(g.d2h_pinned, row.size_bytes, "D2H pinned",
                  "limit: cudaMemcpy device -> cudaHostAlloc memory, same size, same run");
  }
  if (row.gpu_mode == "cuda_ipc") {
    return single(g.d2d, row.size_bytes, "D2D", "limit: cudaMemcpy device -> device, same size, same run");
  }
  if (row.gpu_mode != "staged") return GpuLimit{kNaN, "", "not a GPU row"};
  const GpuLimit h2d = single(g.h2d_pinned, row.size_bytes, "H2D pinned", "");
  const GpuLimit own = transport_figure(report, row);
  if (!std::isfinite(h2d.gbps)) return GpuLimit{kNaN, "", h2d.note};
  if (!std::isfinite(own.gbps)) {
    // Without the transport's figure the limit is the copy alone: still an upper bound.
    return GpuLimit{h2d.gbps, h2d.name,
                    fmt::format("limit: H2D pinned {:.2f} GB/s alone ({})", h2d.gbps, own.note)};
  }
  GpuLimit limit = own.gbps <= h2d.gbps ? own : h2d;
  limit.note = fmt::format("limit: the slower of {} {:.2f} and H2D pinned {:.2f} GB/s{}", own.name, own.gbps,
                           h2d.gbps, own.note.empty() ? "" : " (" + own.note + ")");
  return limit;
}

void attach_gpu_limits(BenchReport* report) {
  for (CellRecord& row : report->gpu.records) {
    if (!row.error.empty() || !row.not_measured.empty()) continue;
    const GpuLimit limit = gpu_limit_for(*report, row);
    if (!std::isfinite(limit.gbps)) continue;
    row.limit_name = limit.name;
    row.limit_gbps = limit.gbps;
    row.ratio_to_limit = row.gbps_median / limit.gbps;
  }
}

}  // namespace wsbench
