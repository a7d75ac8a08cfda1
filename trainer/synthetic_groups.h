// trainer/synthetic_groups.h: trajectory groups made up on the trainer, so
// its step can be timed without generators (trainer --synthetic-groups).
//
// Contract
// - Every call to next(version) returns `groups` groups of `group_size`
//   trajectories, each `prompt_tokens + generated_tokens` tokens long (cut to
//   the model's max_seq_len), sampled by `version` with no staleness: the
//   same shapes every step, so every step does the same work.
// - Tokens are uniform over the vocabulary from a seeded generator; the
//   generated part carries the behaviour log-prob of a uniform sampler
//   (-log vocab). Rewards alternate 1, 0 within a group, so every group has
//   a learning signal and none is dropped as zero-variance.
// - The tasks are real Zorplex tasks (compositional, medium), so the step
//   line's per-environment metrics are those of one environment.
// - Not for learning: the trajectories are noise. The step's compute
//   (forward, backward, optimizer) and the publish are the real ones.
// - Threads: one caller at a time. Errors: none (the options are checked by
//   the caller: all counts >= 1).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "algorithms/replay_buffer.h"
#include "zorplex/tasks.h"

namespace trainer {

struct SyntheticGroupOptions {
  int groups = 0;  // groups per step; 0: off (the trainer takes generators' groups)
  int group_size = 8;
  int prompt_tokens = 64;
  int generated_tokens = 96;
  double temperature = 1.0;  // recorded on the groups (the trainer recomputes log-probs at it)
  std::uint64_t seed = 1;
  // Before the first step, wait (up to the trainer's idle timeout) until this
  // many leases were granted on the weights: readers that have pulled the
  // starting version, so that every timed step has them pulling.
  int wait_readers = 0;
};

class SyntheticGroups {
 public:
  SyntheticGroups(SyntheticGroupOptions options, std::int64_t vocab_size, std::int64_t max_seq_len);

  std::vector<algorithms::TrajectoryGroup> next(std::uint64_t version);

 private:
  SyntheticGroupOptions options_;
  std::int64_t vocab_size_;
  std::size_t length_;
  std::size_t prompt_;
  std::mt19937_64 rng_;
  zorplex::TaskGenerator tasks_;
  std::uint64_t sequence_ = 0;
};

}  // namespace trainer
