// The sweep: every cell (transport x size x readers) run as real processes,
// plus the machine's limits measured in the same run (baselines.h), then the
// GPU rows (gpu_rows.h) after the CUDA copy limits (cuda_limits.h).
//
// Local mode starts, per cell, a publisher process and N reader processes of
// this same executable (roles.h), with the cell's UCX_TLS in their
// environment. Remote mode (`weightsync-bench client`) drives a
// `weightsync-bench server` on another host over one TCP connection and runs
// the readers here. Calling thread only; a failing cell is recorded with its
// error and the sweep goes on; nothing waits without a time limit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "records.h"

namespace wsbench {

struct TransportSpec {
  std::string transport;  // tcp | shm | ucx | verbs
  std::string detail;     // UCX_TLS for ucx, else ""
};

// What a GPU row measures (CellRecord::gpu_mode); kNone for the host rows.
enum class GpuRow {
  kNone,
  kPublishFromDevice,  // publish_from_device() from cudaMalloc memory into host slots; a host reader checks
  kStagedPull,         // host slots, a pull over `transport` into a cudaMalloc destination (staging ring)
  kCudaIpc,            // device slots, a cuda_ipc pull into a cudaMalloc destination
};

struct CellSpec {
  TransportSpec transport;
  std::uint64_t size = 0;
  int readers = 1;
  int compute_rounds = -1;  // -1: SweepConfig::compute_rounds
  GpuRow gpu = GpuRow::kNone;
};

struct SweepConfig {
  std::vector<CellSpec> cells;
  int repetitions = 10;          // measured pulls per reader, after the warm-up (at least)
  double min_gb_per_cell = 2.5;  // ...and at least this much data per reader (up to 200 pulls)
  int warmup = 3;                // at least the slot count, so every slot is touched once
  int compute_rounds = 3;        // extra rounds with the publisher's compute loop on
  std::string self_exe;          // this executable, to start the roles
  std::string remote;            // host:port of a weightsync-bench server; empty: local
  // Baselines are measured at the sizes the cells use: memcpy at every size,
  // the raw TCP stream at the tcp cells' sizes, ucx_perftest per UCX_TLS at
  // those cells' sizes; the checkpoint file at these sizes.
  std::vector<std::uint64_t> checkpoint_sizes;
  // memcpy baselines at these sizes (empty: every cell size). A size without
  // one takes the paired memcpy of its first cell.
  std::vector<std::uint64_t> memcpy_sizes;
  std::vector<std::uint64_t> checkpoint_fsync_sizes;  // the forced-to-disk variant at these
  std::string checkpoint_dir = "/var/tmp";
  double iperf3_seconds = 2.0;
  // The GPU rows (gpu_rows.h: plan_gpu_cells), run after `cells`, and their
  // CUDA copy limits at their sizes. gpu_not_measured non-empty: none is run,
  // each is reported "not measured" with that reason.
  std::vector<CellSpec> gpu_cells;
  std::string gpu_mode = "auto";
  std::string gpu_not_measured;
  std::string gpu_device;  // shown in the report
};

// Runs the baselines, then the cells, printing progress to `progress`.
BenchReport run_sweep(const SweepConfig& config, std::FILE* progress);

}  // namespace wsbench
