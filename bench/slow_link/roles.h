// The roles of weightsync-slowlink (docs/perf/slow_link_sync.md).
//
// trainer: publishes versions 1..count+1 on two publishers (fp32, and a
//   NarrowingPublisher of the bf16 image with deltas) and serves the
//   checkpoint file of any published version on request; one version at a
//   time: it publishes v, waits until v's delta is computed, writes
//   SYNCDIR/published-v, then waits for SYNCDIR/pulled-v from the generator.
// generator: per version, one path after the other (they never share the
//   link): fp32 full pull, bf16 full pull, bf16 delta pull, checkpoint file
//   (request, trainer writes, copy, fsync, load); checks every byte against
//   the image it computes itself from the same source; writes SYNCDIR/pulled-v.
//   Version 1 is the warm-up (and the delta base); versions 2..count+1 are
//   the `count` syncs measured.
// summarize: one table from the JSON files of several generator runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace slowlink {

struct TrainerConfig {
  VersionSource source;
  std::string bind = "127.0.0.1";
  std::uint64_t count = 20;
  std::string dir;
  double timeout_s = 120;
  int delta_level = 1;
};

struct GeneratorConfig {
  std::string dir;
  std::uint64_t count = 0;  // 0: the trainer's
  std::string out;
  std::string label;  // e.g. the link's rate
  double timeout_s = 120;
};

int run_trainer(const TrainerConfig& config);
int run_generator(const GeneratorConfig& config);
int run_summarize(const std::vector<std::string>& files);

// Names of the four paths, in the order the generator runs them.
inline const std::vector<std::string>& path_names() {
  static const std::vector<std::string> names = {"fp32-full", "bf16-full", "bf16-delta", "checkpoint-file"};
  return names;
}

}  // namespace slowlink
