// The run role: the whole demo on localhost, as separate processes of this
// binary: R trainer ranks and G generator ranks, their output relayed, a
// verdict from their exit codes and RESULT lines.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "model.h"

namespace sharded {

struct RunOptions {
  std::string transport = "tcp";
  bool stress = false;
  int trainer_ranks = 2;
  int engine_ranks = 2;
  std::uint64_t pulls = 0;     // per generator; 0: 5000 with --stress
  std::uint64_t versions = 0;  // 0: 3, or with --stress until the generators are done
  double period_ms = 0.0;      // 0: 300, or 2 with --stress
  double jitter_ms = -1.0;     // < 0: 100, or 1.5 with --stress
  bool checksum = false;
  int timeout_s = 100;
};

CLI::App* add_run_command(CLI::App& app, ModelOptions& model, RunOptions& options);
// `model_given`: the user set a model option (else --stress uses a smaller model).
int run_demo(ModelOptions model, RunOptions options, bool model_given);

}  // namespace sharded
