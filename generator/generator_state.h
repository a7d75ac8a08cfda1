// generator/generator_state.h: a generator's place in its task stream, kept
// in a small state file in its --out folder (generator-K-state.json) so that
// a restarted generator (--resume) continues its stream instead of repeating
// its prompts (SLIME's generator state in checkpoints, seed 004).
//
// Contract
// - The task stream: task n of generator `id` has the seed
//   task_seed_base + id * kTasksPerGenerator + (n mod kTasksPerGenerator) and
//   belongs to data epoch n / kTasksPerGenerator (task_in_stream). Each
//   generator's block of seeds is finite, so after kTasksPerGenerator tasks
//   its stream starts over in the next epoch rather than run into generator
//   id + 1's seeds.
// - GeneratorState: the stream's identity (id, task kinds in order,
//   task_seed_base, sampling_seed) and the position after the last finished
//   round (next_task, next_round: the round counter, which is also the
//   sampling seed's position; next_sequence: the next group's sequence).
// - save_generator_state() writes PATH.tmp, flushes it to disk and renames
//   it over PATH: a reader (or a generator killed at any moment) finds the
//   previous state or the new one, never a torn file. Errors name the path.
// - load_generator_state() refuses, with an Error that names the file, what
//   is wrong and what to do: a missing or unreadable file, text that is not
//   this format (corrupt, truncated, another version), or a position that
//   contradicts itself (data_epoch against next_task).
// - check_same_stream(saved, wanted): an Error listing every identity field
//   that differs, both values, and the two ways out (the original flags, or
//   a run without --resume). Resuming another stream would silently repeat
//   or skip prompts, so it is never done.
// - Plain functions; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zorplex/result.h"

namespace generator {

inline constexpr std::uint64_t kTasksPerGenerator = 1000000;

struct TaskInStream {
  std::uint64_t seed = 0;
  std::uint64_t data_epoch = 0;
};
TaskInStream task_in_stream(std::int64_t task_seed_base, std::uint32_t id, std::uint64_t n);

struct GeneratorPosition {
  std::uint64_t next_task = 0;
  std::uint64_t next_round = 0;
  std::uint64_t next_sequence = 0;
};

struct GeneratorState {
  std::uint32_t id = 0;
  std::vector<std::string> tasks;  // task_mix_name() of each --task, in order
  std::int64_t task_seed_base = 0;
  std::uint64_t sampling_seed = 0;
  GeneratorPosition position;
};

// OUT/generator-K-state.json
std::string generator_state_file(const std::string& out_dir, std::uint32_t id);

zorplex::Result<bool> save_generator_state(const std::string& path, const GeneratorState& state);
zorplex::Result<GeneratorState> load_generator_state(const std::string& path);
zorplex::Result<bool> check_same_stream(const GeneratorState& saved, const GeneratorState& wanted,
                                        const std::string& path);

}  // namespace generator
