// weightsync-bench fanout: time until every generator holds version v, across
// the hosts of a test bed (scripts/testbed.sh: one network namespace per host,
// joined by a bridge, each link optionally capped). Host 0 runs the publisher,
// hosts 1..N a subscriber each (a Relay where a topology makes it a parent),
// and the same links carry the baselines: iperf3, a raw TCP stream and
// MPI_Bcast. docs/perf/fanout.md has the method and the figures.
//
// Times are CLOCK_MONOTONIC nanoseconds (std::chrono::steady_clock on Linux):
// every namespace shares the kernel's clock, so a commit time taken in host 0
// and a "holds v" time taken in host i are comparable.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace wsbench {

struct FanoutConfig {
  std::string self_exe;        // this executable (re-executed in the hosts)
  std::string testbed_script;  // scripts/testbed.sh
  std::string mpi_exe;         // weightsync-mpi-bcast, "" when not built
  int subscribers = 8;
  std::vector<std::uint64_t> sizes;
  std::string rate = "1gbit";           // tc rate per host link, "none": unshaped
  std::vector<std::string> topologies;  // "flat", "treeK", "chain"
  int runs = 3;
  std::string transport = "tcp";
  std::string out_dir;                 // "" : print only
  std::vector<std::string> baselines;  // "iperf3", "stream", "mpi"
  double iperf3_seconds = 3.0;
  std::uint64_t relay_chunk = 0;  // RelayOptions::chunk_bytes; 0: the library's default
  std::string command_line;
};

// The upstream of host i (1..hosts-1) in a topology over hosts 0..hosts-1;
// -1 for an unknown topology name. flat: 0; treeK: (i-1)/K; chain: i-1.
int fanout_parent(const std::string& topology, int host);
bool fanout_topology_valid(const std::string& topology);

// One published version: the commit in host 0 and each subscriber's "holds v".
struct FanoutVersion {
  std::uint64_t version = 0;
  std::int64_t commit_ns = 0;
  std::vector<std::int64_t> held_ns;  // index i-1 for host i
  double time_to_all_s() const;       // max held - commit
  double median_s() const;
  double min_s() const;
};

struct ProcessCpu {
  int host = 0;
  std::string role;  // publisher, subscriber, relay
  double cpu_s = 0;  // over the measured versions
};

// One (size, topology) row, or a baseline row (topology "baseline:...").
struct FanoutRow {
  std::uint64_t size = 0;
  std::string topology;
  std::vector<FanoutVersion> versions;  // measured ones (the warm-up is not kept)
  std::vector<ProcessCpu> cpu;
  double wall_s = 0;            // the measured versions, first PUBLISH to last HELD
  double machine_busy = -1;     // share of all cores busy over that window (/proc/stat), -1 unknown
  std::vector<double> times_s;  // baselines: per repetition (stream: one transfer; mpi: max over ranks)
  std::string error;            // why it was not measured
  std::string note;
  // Medians over the measured versions (or repetitions).
  double time_to_all_s = -1, median_s = -1, min_s = -1;
};

struct FanoutHost {
  int index = 0;
  std::string ns, address;
};

struct FanoutTarget {
  std::string name, verdict, detail;  // verdict: PASS, MISS, n/a
};

struct FanoutReport {
  FanoutConfig config;
  std::string bed;
  std::vector<FanoutHost> hosts;
  std::vector<std::string> commands;  // every testbed.sh / mpirun command, as run
  double iperf3_bytes_per_s = -1;     // L
  std::string iperf3_note;
  std::vector<FanoutRow> rows;
  std::vector<FanoutTarget> targets;
  double wall_s = 0;
  std::string machine;
};

// The whole measurement; returns the exit code (77: no test bed here).
int run_fanout(const FanoutConfig& config);

// Hidden roles, run inside a host by `testbed.sh exec`, driven over stdin/stdout
// one line per command (the style of roles.h; any failure answers "ERROR <why>"):
//   publisher  (on start) -> READY <address>
//              PUBLISH <v> -> COMMITTED <v> <commit_ns>   (marks the image, copies it into a SlotWriter;
//                                                  commit_ns: the clock just before commit())
//   subscriber (on start) -> READY <transport>
//              PULL <v> <timeout_ms> -> WAITING <v>, then HELD <v> <held_ns> once a pull of v
//                                        finished and its version marks checked out
//   relay      (on start) -> READY <address>
//              PULL <v> <timeout_ms> -> WAITING <v>, then HELD <v> <held_ns> once the relay holds v
//   stream receiver (on start) -> READY <address>;  RECV <bytes> -> RECEIVED <end_ns>
//   stream sender   (on start) -> READY;            SEND <bytes> -> SENT <start_ns>
//   every role: CPU -> CPU <process_cpu_s>; QUIT (or end of input) -> exits
int run_fanout_publisher(const std::string& bind, std::uint64_t size);
int run_fanout_subscriber(const std::string& upstream, std::uint64_t size, const std::string& transport);
int run_fanout_relay(const std::string& upstream, const std::string& bind, const std::string& transport,
                     bool pipelined, std::uint64_t chunk_bytes);
bool fanout_relays_built(std::string* why);
int run_fanout_stream_receiver(const std::string& bind);
int run_fanout_stream_sender(const std::string& peer);

// Report helpers (fanout_report.cc, fanout_plot.cc).
void fanout_summarize(FanoutRow* row);
void fanout_evaluate_targets(FanoutReport* report);
void fanout_print(std::FILE* out, const FanoutReport& report);
bool fanout_write_json(const std::string& path, const FanoutReport& report, std::string* error);
bool fanout_write_plot(const std::string& path, const FanoutReport& report, std::string* error);

}  // namespace wsbench
