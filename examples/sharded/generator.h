// The generator role: one engine rank pulling its tensor-parallel slices of
// every version from all trainer ranks (SubscriberGroup) and checking them.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "model.h"

namespace sharded {

struct GeneratorOptions {
  int rank = 0;
  int ranks = 2;
  std::vector<std::string> trainers;  // one address per trainer rank, in rank order
  std::string transport = "auto";
  std::uint64_t version = 0;   // pull exactly this version once
  std::uint64_t versions = 0;  // pull exactly versions 1..N, one by one
  std::uint64_t pulls = 0;     // pull the newest complete version N times
  bool repull = false;         // with --pulls: the newest complete version even if already held
  int wait_ms = 10000;
  int max_rounds = 1000;
  std::uint64_t progress_every = 1000;
};

CLI::App* add_generator_command(CLI::App& app, ModelOptions& model, GeneratorOptions& options);
int run_generator(const ModelOptions& model, const GeneratorOptions& options);

}  // namespace sharded
