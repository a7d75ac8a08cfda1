// loop/rl_checkpoint.h: the RL trainer's checkpoint folder.
//
// Contract
// - DIR/policy.safetensors is an ordinary policy file (zorplex-eval and
//   generator --checkpoint read it) whose metadata adds "rl.version" (the
//   version last published), "rl.step" (optimizer steps taken) and
//   "rl.options" (the run's settings as JSON); every metadata key of the
//   starting checkpoint that is not an rl.* key (the SFT options, hence the
//   prompt format) is carried over.
// - DIR/optimizer-stepN.safetensors holds the AdamW moments and step, and
//   the running-mean baseline, after step N (also in its metadata).
// - Each file is written atomically (temporary file + rename): first the
//   new optimizer file, then the policy, then older optimizer files are
//   removed. A crash at any point leaves a policy file whose rl.step names
//   an optimizer file that exists: the checkpoint is always resumable.
// - Errors: I/O failures and a missing, foreign or inconsistent folder are
//   returned as an Error naming the file; nothing throws.
#pragma once

#include <cstdint>
#include <string>

#include "policy/safetensors.h"
#include "training/rl_update.h"
#include "zorplex/result.h"

namespace loop {

struct RlProgress {
  std::uint64_t version = 0;  // the version of the weights in the file
  int step = 0;               // optimizer steps taken
};

std::string rl_policy_file(const std::string& dir);
std::string rl_optimizer_file(const std::string& dir, int step);

// Whether DIR holds an RL checkpoint (its policy file has rl.step).
bool has_rl_checkpoint(const std::string& dir);

zorplex::Result<std::uint64_t> save_rl_checkpoint(const std::string& dir, const policy::Transformer& model,
                                                  training::RlUpdater& updater, const RlProgress& progress,
                                                  const std::string& options_json,
                                                  const policy::Metadata& carried);

// The rl.version and rl.step of a policy file's metadata.
zorplex::Result<RlProgress> read_rl_progress(const policy::Metadata& metadata);

// Loads DIR's optimizer state and baseline into updater; progress is what
// the policy file said (read_rl_progress), to check the pair matches.
zorplex::Result<bool> restore_rl_optimizer(const std::string& dir, training::RlUpdater& updater,
                                           const RlProgress& progress);

// The prompt format the policy was trained with (from the SFT options the
// checkpoint carries); the default format when it carries none.
zorplex::Result<policy::PromptFormat> prompt_format_of(const policy::Metadata& metadata);

// The starting checkpoint's metadata minus rl.* keys and the keys
// save_model() writes itself (config, format).
policy::Metadata carried_metadata(const policy::Metadata& metadata);

}  // namespace loop
