// trainer/warm_start.h: the SFT warm start the trainer runs when its starting
// checkpoint does not exist yet (zorplex-sft does the same, with more knobs).
//
// Contract
// - ensure_warm_start(dir, steps, stop): when DIR/policy.safetensors exists,
//   does nothing. Otherwise trains the default SftOptions policy for `steps`
//   steps (progress every 50) and writes the SFT checkpoint folder DIR;
//   an interrupted run is saved and resumed by the next call.
// - Errors: a failed step or save; stop set -> Error "interrupted".
// - Thread: the caller's; torch's intra-op threads.
#pragma once

#include <atomic>
#include <string>

#include "zorplex/result.h"

namespace trainer {

zorplex::Result<bool> ensure_warm_start(const std::string& dir, int steps, const std::atomic<bool>& stop);

}  // namespace trainer
