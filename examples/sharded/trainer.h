// The trainer role: one trainer rank's Publisher, publishing its row shards
// of every version on a clock shared with the other ranks.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

#include "model.h"

namespace sharded {

struct TrainerOptions {
  int rank = 0;
  int ranks = 2;
  std::uint64_t versions = 3;
  double period_ms = 200.0;
  double jitter_ms = 0.0;
  std::int64_t start_at_ms = -1;  // Unix epoch ms of version 0's tick; -1: wait for "start T" on stdin
  int slots = 3;
  bool checksum = false;
  std::uint64_t print_every = 1;
  int linger_s = 300;
};

CLI::App* add_trainer_command(CLI::App& app, ModelOptions& model, TrainerOptions& options);
int run_trainer(const ModelOptions& model, const TrainerOptions& options);

}  // namespace sharded
