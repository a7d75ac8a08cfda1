// The `fanout` subcommand of weightsync-bench and its hidden per-host roles
// (fanout.h), as CLI11 subcommands. main() constructs a FanoutCli on its app
// before parsing and asks it, after parsing, whether it has the call.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "fanout.h"

namespace wsbench {

class FanoutCli {
 public:
  explicit FanoutCli(CLI::App& app);
  // The exit code when one of the fanout subcommands was chosen, else nullopt.
  std::optional<int> run(const std::string& self_exe, const std::string& command_line);

 private:
  CLI::App* fanout_ = nullptr;
  CLI::App* publisher_ = nullptr;
  CLI::App* subscriber_ = nullptr;
  CLI::App* relay_ = nullptr;
  CLI::App* stream_recv_ = nullptr;
  CLI::App* stream_send_ = nullptr;
  FanoutConfig config_;
  std::string sizes_ = "64MiB,256MiB", topologies_ = "flat,tree2,chain", baselines_ = "iperf3,stream,mpi";
  std::string bind_, upstream_, peer_, transport_ = "tcp", size_;
  bool no_pipeline_ = false;
  std::uint64_t chunk_ = 0;       // fanout-relay --chunk (bytes)
  std::string relay_chunk_;       // fanout --relay-chunk (with a unit)
};

}  // namespace wsbench
