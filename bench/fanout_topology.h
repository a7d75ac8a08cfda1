// The pieces of a fanout measurement the orchestrator (fanout_run.cc) calls:
// one topology row (fanout_topology.cc) and the baselines on the same bed
// (fanout_baselines.cc, fanout_mpi.cc). Each returns its row with `error` set
// instead of throwing, and leaves no process behind.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fanout.h"
#include "fanout_testbed.h"

namespace wsbench {

struct TopologyRun {
  const FanoutConfig* config = nullptr;
  TestBed* bed = nullptr;
  std::string topology;
  std::uint64_t size = 0;
  std::string size_label;
  std::string secret;  // this run's WEIGHTSYNC_SECRET
};

FanoutRow run_topology(const TopologyRun& run);

// "1gbit" -> 1.25e8 bytes/s (tc's units: bit, kbit, mbit, gbit, tbit; bps.. gbps are bytes); -1 if unknown.
double bytes_per_second_of_rate(const std::string& rate);

// iperf3, one stream, host 0 -> host 1 for `seconds`: bytes/s received, or -1 and *note says why.
double measure_iperf3_between(TestBed& bed, double seconds, std::string* note);

// The raw TCP stream baseline, host 0 -> host 1: one warm-up transfer, then `runs`.
FanoutRow measure_stream_between(const TopologyRun& run);

// MPI_Bcast of the run's size from rank 0 over every host (Open MPI, TCP BTL).
FanoutRow measure_mpi_bcast(const TopologyRun& run, std::vector<std::string>* commands);

}  // namespace wsbench
