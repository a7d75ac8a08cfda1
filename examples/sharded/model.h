// The model every role of ws-example-sharded agrees on: a small
// transformer-like set of float32 global tensors, how R trainer ranks hold it
// (every tensor split by rows) and how G engine ranks at tensor parallelism
// TP=G want it (fused qkv and gate_up, column-split o and down, replicated
// norms, vocabulary-parallel embedding).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "weightsync/sharding.h"

namespace sharded {

struct ModelOptions {
  int layers = 2;
  std::int64_t hidden = 256;
  std::int64_t kv_hidden = 64;
  std::int64_t ffn = 512;
  std::int64_t vocab = 1024;
};

// Adds --layers, --hidden, --kv-hidden, --ffn, --vocab to a (sub)command.
void add_model_options(CLI::App& app, ModelOptions& model);
// The same options as command-line arguments, to pass to a child process.
std::vector<std::string> model_arguments(const ModelOptions& model);
// Empty if the model splits over `trainer_ranks` and `engine_ranks`, else why not.
std::string check_divisible(const ModelOptions& model, int trainer_ranks, int engine_ranks);

// The global tensors, in a fixed order: a tensor's id (values.h) is its index.
std::vector<weightsync::GlobalTensor> global_tensors(const ModelOptions& model);
// `ranks` trainer ranks, every tensor split by rows (dim 0); a tensor whose
// rows do not divide is held whole by every rank (replicas). Local names are
// the global names (each rank publishes its own layout).
weightsync::ShardedSource trainer_source(const ModelOptions& model, int ranks);
// `ranks` engine ranks at TP = ranks: per layer a fused "layers.i.qkv" [(hidden
// + 2 kv) / TP, hidden] (q, k, v row blocks), "layers.i.o" [hidden, hidden /
// TP] (columns), a fused "layers.i.gate_up" [2 ffn / TP, hidden], "layers.i.down"
// [hidden, ffn / TP] (columns), "layers.i.norm" [hidden] (whole); "embed"
// [vocab / TP, hidden] (rows).
weightsync::ShardedTarget engine_target(const ModelOptions& model, int ranks);

}  // namespace sharded
