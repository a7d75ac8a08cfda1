// weightsync-slowlink: seconds per sync of the RL policy across a capped link,
// four ways (docs/perf/slow_link_sync.md): fp32 full pull, bf16 full pull,
// bf16 delta pull, and the checkpoint-file path (safetensors written, copied
// over TCP, fsynced, loaded). Run the trainer role on one host and the
// generator role on another (scripts/slow-link-figures.sh does it on the test
// bed), sharing the folder --dir.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "roles.h"

int main(int argc, char** argv) {
  CLI::App app{
      "weightsync-slowlink: seconds per sync across a capped link: fp32 full pull, bf16 full pull, bf16 "
      "delta "
      "pull, checkpoint file (docs/perf/slow_link_sync.md). Hosts other than loopback need WEIGHTSYNC_SECRET "
      "(the same on both roles)."};
  app.require_subcommand(1);

  slowlink::TrainerConfig trainer;
  std::string versions_dir = "/tmp/i18/versions";
  bool synthetic = false;
  auto* t = app.add_subcommand(
      "trainer",
      "Publish versions 1..N+1 (fp32 publisher; bf16 NarrowingPublisher with deltas) and serve their "
      "checkpoint "
      "files; one version at a time, each after the generator acknowledged the previous one");
  t->add_option("--versions", versions_dir, "folder of packed float32 versions v0001.bin, v0002.bin, ...")
      ->capture_default_str();
  t->add_flag("--synthetic", synthetic, "make random-walk versions instead of reading --versions");
  t->add_option("--elements", trainer.source.elements, "float32 elements per synthetic version")
      ->capture_default_str();
  t->add_option("--seed", trainer.source.seed, "seed of the synthetic versions")->capture_default_str();
  t->add_option("--bind", trainer.bind, "IPv4 address the publishers and the file server listen on")
      ->capture_default_str();
  t->add_option("--count", trainer.count, "syncs measured (versions 2..N+1; version 1 is the warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  t->add_option("--dir", trainer.dir, "sync folder shared with the generator (use a fresh one)")->required();
  t->add_option("--timeout", trainer.timeout_s, "bound of every wait, seconds")->capture_default_str();
  t->add_option("--delta-level", trainer.delta_level, "zstd level of the deltas")->capture_default_str();

  slowlink::GeneratorConfig generator;
  auto* g =
      app.add_subcommand("generator",
                         "Per version: fp32 full pull, bf16 full pull, bf16 delta pull, checkpoint file, one "
                         "after the other, every "
                         "byte checked; writes every sample and the medians as JSON and prints a table");
  g->add_option("--dir", generator.dir, "sync folder shared with the trainer")->required();
  g->add_option("--count", generator.count,
                "syncs to measure, the trainer's --count (0: take it from the trainer)")
      ->capture_default_str();
  g->add_option("--out", generator.out, "JSON results file")->required();
  g->add_option("--label", generator.label, "name of the link in the results (e.g. 100mbit)")
      ->capture_default_str();
  g->add_option("--timeout", generator.timeout_s, "bound of every wait and transfer, seconds")
      ->capture_default_str();

  std::vector<std::string> files;
  auto* s = app.add_subcommand("summarize", "One table from generator JSON files");
  s->add_option("files", files, "generator --out files")->required();

  CLI11_PARSE(app, argc, argv);
  if (t->parsed()) {
    trainer.source.synthetic = synthetic;
    if (!synthetic) trainer.source.dir = versions_dir;
    return slowlink::run_trainer(trainer);
  }
  if (g->parsed()) {
    if (generator.label.empty()) generator.label = "link";
    return slowlink::run_generator(generator);
  }
  return slowlink::run_summarize(files);
}
