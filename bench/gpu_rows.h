// The GPU rows of weightsync-bench, as pure logic: whether to measure them
// (--gpu auto|on|off against weightsync::cuda_info()), which rows a run
// measures, and the limit each row is compared with:
//   publish_from_device  size / (enqueue to commit) vs pinned D2H cudaMemcpy
//   staged (tcp/shm/ucx) the pull into cudaMalloc memory vs the slower of that
//                        transport's host-destination pull in the same run
//                        (else its own limit) and pinned H2D cudaMemcpy
//   cuda_ipc             the pull into cudaMalloc memory vs D2D cudaMemcpy
// all at the row's size, measured in the same run (cuda_limits.h).
//
// Contract: pure functions of their arguments; calling thread only. They can
// throw std::bad_alloc; the sweep and the report catch it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "records.h"
#include "sweep.h"

namespace wsbench {

enum class GpuFlag { kAuto, kOn, kOff };

// "auto", "on", "off" -> *flag; false for anything else.
bool parse_gpu_flag(const std::string& text, GpuFlag* flag);
const char* gpu_flag_name(GpuFlag flag);

struct GpuDecision {
  bool measure = false;
  std::string not_measured;  // why not, when !measure
  bool fatal = false;        // --gpu on but nothing can be measured: exit non-zero with not_measured
};
// `usable` and `reason` come from weightsync::cuda_info() (not asked for
// --gpu off); `bench_built`: cuda_runtime_built(); `remote`: client mode,
// where the GPU rows are not run (they need the publisher on this host).
GpuDecision decide_gpu(GpuFlag flag, bool usable, const std::string& reason, bool bench_built, bool remote);

// CellRecord::gpu_mode of a row: "publish_from_device", "staged", "cuda_ipc" ("" for kNone).
const char* gpu_row_name(GpuRow row);

// The GPU rows of a run, 1 reader each, no compute loop, in report order: the
// publish from device at each size (its reader checks the bytes over shm,
// else tcp, else the first transport, into host memory), a staged pull for
// each host transport at each size, then cuda_ipc at each size.
std::vector<CellSpec> plan_gpu_cells(const std::vector<TransportSpec>& transports,
                                     const std::vector<std::uint64_t>& sizes);

// The limit a GPU row is compared with (see the top of this file).
struct GpuLimit {
  double gbps = kNaN;  // NaN: no limit figure at that size
  std::string name;    // the figure that sets it: "D2H pinned", "tcp host pull", "H2D pinned", "D2D"
  std::string note;    // how it was chosen, with both figures for a staged row; why it is missing
};
GpuLimit gpu_limit_for(const BenchReport& report, const CellRecord& row);

// Sets limit_name, limit_gbps and ratio_to_limit of every measured GPU row.
void attach_gpu_limits(BenchReport* report);

}  // namespace wsbench
