// The `pause` subcommand of weightsync-bench (pause_bench.h), as a CLI11
// subcommand. main() constructs a PauseCli on its app before parsing and asks
// it, after parsing, whether it has the call.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "pause_bench.h"

namespace wsbench {

class PauseCli {
 public:
  explicit PauseCli(CLI::App& app);
  // The exit code when `pause` was chosen, else nullopt.
  std::optional<int> run(const std::string& command_line);

 private:
  CLI::App* pause_ = nullptr;
  CLI::Option* sizes_option_ = nullptr;
  PauseConfig config_;
  std::string sizes_ = "256MiB,1GiB", transports_ = "shm,tcp", json_;
  bool quick_ = false;
};

}  // namespace wsbench
