// The figures weightsync-bench produces: one CellRecord per (transport, detail,
// size, readers) cell, and the machine's limits (Baselines) measured in the
// same run; the GPU rows and their limits (GpuSection) beside them. Plain
// data; report.h renders them, summary statistics come from stats.h. GB means
// 10^9 bytes everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace wsbench {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct CellRecord {
  std::string transport;  // "tcp" | "shm" | "ucx" | "verbs"
  std::string detail;     // UCX_TLS for ucx ("posix,self"), else ""
  std::uint64_t size_bytes = 0;
  int readers = 0;
  int repetitions = 0;  // measured pulls per reader (after the warm-up)

  // Per-reader pull bandwidth. p99 is the bandwidth that 99% of pulls met or
  // beat: size / (p99 of pull latency).
  double gbps_median = kNaN, gbps_p99 = kNaN;
  // Duration of one Subscriber::pull() of the whole image.
  double latency_s_median = kNaN, latency_s_p99 = kNaN;
  // From the publisher's commit of version v until the last reader holds v.
  double commit_to_all_s_median = kNaN, commit_to_all_s_p99 = kNaN;
  // Publisher::publish() of a contiguous image (the copy into the slot).
  double publish_s_median = kNaN;
  // 1 - (compute-loop rate while readers pull) / (its rate idle), in the publisher.
  double compute_slowdown = kNaN;
  // CPU seconds (user + system) per GB delivered, each side. The publisher's
  // excludes its compute loop and its publish copy.
  double publisher_cpu_s_per_gb = kNaN, reader_cpu_s_per_gb = kNaN;

  // The baseline this row is compared with, so that the machine's drift
  // during a long sweep does not enter the ratio: for shm the paired memcpy
  // above; for tcp and ucx the raw TCP stream / ucx_perftest at the row's
  // size, measured just before, halfway through and just after the row.
  std::string limit_name;
  double limit_gbps = kNaN;      // the mean of the measurements
  double limit_spread = kNaN;    // (max - min) / mean of them: the machine's noise meanwhile
  double ratio_to_limit = kNaN;  // gbps_median / limit_gbps

  // memcpy of the same size into the same destination, by each reader right
  // before each of its pulls (so it shares the pull's moment and contention):
  // size / median time. The shm rows' limit.
  double memcpy_paired_gbps = kNaN;

  std::string error;  // non-empty: the cell failed; the figures are NaN

  // GPU rows only (BenchReport::gpu), "" for host rows:
  //   "publish_from_device": Publisher::publish_from_device() from cudaMalloc
  //     memory into host slots; gbps/latency are size / (enqueue to commit).
  //   "staged": a pull over `transport` into a cudaMalloc destination through
  //     the page-locked staging ring (PullResult::staged checked on every pull).
  //   "cuda_ipc": device slots, a pull into a cudaMalloc destination.
  std::string gpu_mode;
  std::string not_measured;  // GPU rows: why the row was not run (no device, --gpu off)
};

// A baseline measured at one size.
struct BaselineFigure {
  double gbps = kNaN;  // median over `repetitions`
  int repetitions = 0;
  std::string note;  // why it is missing, or how it was taken
};

struct Baselines {
  // size_bytes -> figure
  std::map<std::uint64_t, BaselineFigure> memcpy_1t, memcpy_2t, tcp_raw, file, file_fsync;
  // UCX_TLS -> size_bytes -> figure (ucx_perftest -t ucp_get)
  std::map<std::string, std::map<std::uint64_t, BaselineFigure>> ucx_perftest;
  BaselineFigure iperf3;  // one stream over loopback, size-independent
};

// The GPU part of a run: the GPU rows, and the CUDA copy limits they are
// compared with, measured in the same run (cuda_limits.h).
struct GpuSection {
  std::string mode = "auto";  // --gpu: auto | on | off
  std::string not_measured;   // non-empty: why no GPU row or limit was measured
  std::string device;         // the device, CUDA runtime and driver, when measured
  std::vector<CellRecord> records;
  // size_bytes -> figure: cudaMemcpy device -> cudaHostAlloc memory, the
  // reverse, and cudaMalloc -> cudaMalloc.
  std::map<std::uint64_t, BaselineFigure> d2h_pinned, h2d_pinned, d2d;
};

struct BenchReport {
  std::string host;                  // hostname
  std::string started_at;            // ISO 8601 UTC
  std::string command_line;          // how it was run
  std::uint64_t reference_size = 0;  // the size the single-number baselines in the JSON are taken at
  std::vector<CellRecord> records;
  Baselines baselines;
  GpuSection gpu;
};

}  // namespace wsbench
