// The results of `weightsync-bench sharded` (sharded.h): every measured run
// of every row, per transport; the table and the JSON file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sharded.h"

namespace wsbench {

// One measured run of a row: from the start signal to the last reader's
// completion, on the coordinator's CLOCK_MONOTONIC.
struct ShardedSample {
  int run = 0;                                // 1-based, measured runs only
  double seconds = 0;                         // start signal -> last reader's pull() returned
  double gbps = 0;                            // row bytes / seconds, GB = 1e9
  std::vector<double> reader_pull_s;          // each reader's own pull() time
  std::vector<std::vector<double>> member_s;  // per reader: each member's (trainer rank's) pull seconds
  double reader_cpu_s = 0;                    // all readers' process CPU during their pulls
  std::uint64_t checked_bytes = 0;            // bytes compared with the pattern, all readers
  bool checksums_verified = false;            // every reader verified the publisher's checksums
};

struct ShardedRow {
  std::string name;   // sharded | single | tp1
  std::string label;  // "2x2", "1x1", "1x2": publishers x readers
  int publishers = 0;
  int readers = 0;
  std::uint64_t bytes = 0;          // delivered per run, all readers
  std::vector<std::string> pieces;  // per reader: contiguous ranges per member ("4100,4096")
  std::vector<ShardedSample> samples;
  // Medians over the samples.
  double seconds_median = 0, gbps_median = 0, seconds_min = 0, seconds_max = 0;
  double reader_pull_s_median = 0;  // median over runs of the slowest reader's own pull time
  double reader_cpu_s_median = 0;
  void summarize();
};

struct ShardedTransportResult {
  std::string transport;
  std::vector<ShardedRow> rows;     // sharded, single, then tp1 when measured
  double ratio = 0;                 // sharded gbps_median / single gbps_median
  double paired_ratio = 0;          // median over runs of (sharded / single) of the same iteration
  std::string verdict;              // PASS / MISS against config.target, or ERROR
  double other_cpu_cores = -1;      // CPU of processes outside this bench meanwhile (cores), -1 unknown
  double steal_cores = -1;          // hypervisor steal meanwhile (cores), -1 unknown
  double kernel_thread_cores = -1;  // kernel threads (ksoftirqd, kworkers) meanwhile (cores), -1 unknown
  double wall_s = 0;
  std::string error;
};

struct ShardedReport {
  std::string host, machine, started_at, command_line, loadavg_start, loadavg_end;
  ShardedConfig config;
  std::vector<ShardedTransportResult> transports;
  double wall_s = 0;
};

void print_sharded_table(std::FILE* out, const ShardedReport& report);
bool write_sharded_json(const std::string& path, const ShardedReport& report, std::string* error);

}  // namespace wsbench
