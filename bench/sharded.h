// weightsync-bench sharded: R publishers (the ranks of an FSDP trainer, each
// holding the dim-0 shard of every matrix) by T readers (the ranks of a
// tensor-parallel engine, each pulling its slices through a RoutingPlan and a
// SubscriberGroup), beside a single publisher holding the whole model pulled
// by one plain Subscriber: the same bytes, the same transport, the same run
// (docs/perf/sharded.md).
//
// The model: `matrices` float32 matrices of `width` columns, `total_bytes` in
// all. Even-numbered matrices are column-parallel (an engine rank holds a
// block of rows: Box::split(shape, 0, T, g)), odd-numbered ones row-parallel
// (a block of columns: Box::split(shape, 1, T, g)), as in a Megatron layer.
// Element (i, j) of matrix m at version v holds the 32-bit pattern
// pattern_base(v, m) + i * width + j, so a reader can check any element it
// received without holding a copy of the model.
//
// Rows of a transport (each a set of child processes of this executable):
//   sharded  R publishers (ShardedSource::rank_layout(r)) x T readers
//            (RoutingPlan, SubscriberGroup, prepare() once)
//   single   1 publisher with the whole model x 1 reader, Subscriber with a
//            contiguous destination: the same total bytes
//   tp1      the same whole-model publisher x T readers with their TP
//            slices (R = 1 sharded; measured when R > 1 and T > 1)
//
// Role protocol (one line per command, one line per answer, "ERROR <why>" on
// failure; times are CLOCK_MONOTONIC, comparable across processes):
//   sharded-publisher --model TOTAL,WIDTH,MATRICES --ranks R --rank r [--checksum]
//     (on start)   -> READY <address> <slot_bytes>
//     PUBLISH <v>  -> COMMITTED <v> <fill_s>   (writes v's pattern into a slot in place, commits)
//     QUIT
//   sharded-reader --model ... --ranks R --readers T --rank g --addresses A,B,... --transport X
//                  [--single] [--verify sample|full]
//     (on start)   -> READY <transport> <bytes> <pieces per member, comma-separated>
//     PULL <v>     -> HELD <v> <pull_s> <end_ns> <bytes> <checked_bytes> <cpu_s> <checksums 0|1>
//                     <member seconds, comma-separated>
//                     (pulls exactly v, then checks the bytes; end_ns is taken when pull() returns,
//                     before the check)
//     QUIT
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/sharding.h"

namespace wsbench {

struct ShardedModel {
  std::uint64_t total_bytes = 256ull << 20;
  std::int64_t width = 4096;  // float32 columns per matrix
  int matrices = 8;

  std::int64_t rows() const;  // per matrix
  std::uint64_t matrix_bytes() const { return total_bytes / static_cast<std::uint64_t>(matrices); }
  // "" when R publishers x T readers split this model evenly; else why not.
  std::string check(int ranks, int readers) const;
  std::string name(int m) const;       // "w3.row" (row-parallel) or "w2.col" (column-parallel)
  std::size_t split_dim(int m) const;  // the dimension the engine splits: 0 (col) or 1 (row)
  std::vector<weightsync::GlobalTensor> tensors() const;
  // R trainer ranks, each the dim-0 block r of every matrix (R = 1: the whole model).
  weightsync::ShardedSource source(int ranks) const;
  // T engine ranks, each matrix's block g along its split_dim.
  weightsync::ShardedTarget target(int readers) const;
  // "TOTAL,WIDTH,MATRICES" for the roles' command lines, and back.
  std::string encode() const;
  static std::optional<ShardedModel> decode(const std::string& text);
};

// The first element's pattern of matrix m at version v (see above).
inline std::uint32_t pattern_base(std::uint64_t version, int m) {
  std::uint64_t x =
      version * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(m + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::uint32_t>(x);
}

struct ShardedConfig {
  std::string self_exe;
  std::string command_line;
  ShardedModel model;
  int ranks = 2;
  int readers = 2;
  std::vector<std::string> transports = {"tcp", "shm"};
  int runs = 5;
  int warmup = 3;
  bool checksum = false;
  std::string verify = "sample";  // sample | full
  bool tp1 = true;                // the 1 x T row
  std::string json;
  double target = 0.9;
};

int run_sharded(const ShardedConfig& config);
int run_sharded_publisher(const ShardedModel& model, int ranks, int rank, bool checksum);
int run_sharded_reader(const ShardedModel& model, int ranks, int readers, int rank,
                       const std::vector<std::string>& addresses, const std::string& transport, bool single,
                       const std::string& verify);

// The `sharded` subcommand and its hidden roles, as CLI11 subcommands. main()
// constructs one on its app before parsing and asks it, after parsing,
// whether it has the call.
class ShardedCli {
 public:
  explicit ShardedCli(CLI::App& app);
  // The exit code when one of the sharded subcommands was chosen, else nullopt.
  std::optional<int> run(const std::string& self_exe, const std::string& command_line);

 private:
  CLI::App* sharded_ = nullptr;
  CLI::App* publisher_ = nullptr;
  CLI::App* reader_ = nullptr;
  ShardedConfig config_;
  std::string size_ = "256MiB", transports_ = "tcp,shm";
  bool no_tp1_ = false;
  // Roles.
  std::string model_, addresses_, transport_, verify_ = "sample";
  int role_ranks_ = 1, role_readers_ = 1, role_rank_ = 0;
  bool role_checksum_ = false, single_ = false;
};

}  // namespace wsbench
