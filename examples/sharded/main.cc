// ws-example-sharded: a trainer sharded over R ranks (every tensor split by
// rows) feeding an inference engine at TP=G with fused qkv and gate_up
// tensors, through RoutingPlan and SubscriberGroup. Subcommands: trainer
// (one trainer rank), generator (one engine rank), run (the whole demo on
// localhost). See README.md next to this file.
#include <CLI/CLI.hpp>

#include "generator.h"
#include "run.h"
#include "trainer.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Sharded trainer -> tensor-parallel generators over libweightsync (RoutingPlan + SubscriberGroup)."};
  app.require_subcommand(1);
  sharded::ModelOptions trainer_model, generator_model, run_model;
  sharded::TrainerOptions trainer;
  sharded::GeneratorOptions generator;
  sharded::RunOptions run;
  CLI::App* trainer_cmd = sharded::add_trainer_command(app, trainer_model, trainer);
  CLI::App* generator_cmd = sharded::add_generator_command(app, generator_model, generator);
  CLI::App* run_cmd = sharded::add_run_command(app, run_model, run);
  CLI11_PARSE(app, argc, argv);
  if (trainer_cmd->parsed()) return sharded::run_trainer(trainer_model, trainer);
  if (generator_cmd->parsed()) return sharded::run_generator(generator_model, generator);
  bool model_given = false;
  for (const char* name : {"--layers", "--hidden", "--kv-hidden", "--ffn", "--vocab"}) {
    model_given = model_given || run_cmd->count(name) > 0;
  }
  return sharded::run_demo(run_model, run, model_given);
}
