// trainer/batcher_choice.h: what the trainer's --token-budget, --env-fractions
// and --spill-wait mean for its batches (trainer_main.cc parses, this
// decides), as algorithm_choice.h does for the algorithm flags.
//
// Contract
// - batcher_options_from_flags(): the token-budget batcher's options
//   (algorithms/token_budget_batcher.h), or an Error naming the flag:
//   a negative --token-budget; --env-fractions that do not parse
//   (parse_env_fractions: malformed text, an unknown environment, a name
//   twice, a fraction outside [0, 1], a sum over 1); --env-fractions or
//   --spill-wait without --token-budget (they mean nothing without it); a
//   negative or non-finite --spill-wait; --spill-wait in sync mode (the round
//   decides what arrives: nothing to wait for). The spill wait is capped at
//   --idle-timeout.
// - check_token_budget(options, max_seq_len): the budget against the
//   policy's context (a budget below max_seq_len could never take a
//   full-length trajectory): an Error naming --token-budget.
// - Pure; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/token_budget_batcher.h"
#include "zorplex/result.h"

namespace trainer {

struct BatcherFlags {
  std::int64_t token_budget = 0;  // 0: off
  std::string env_fractions;      // "": equal shares
  double spill_wait_s = 5.0;
  bool spill_wait_given = false;
  bool sync = false;
  double idle_timeout_s = 120.0;
};

zorplex::Result<algorithms::BatcherOptions> batcher_options_from_flags(const BatcherFlags& flags);
zorplex::Result<bool> check_token_budget(algorithms::BatcherOptions& options, std::uint64_t max_seq_len);

}  // namespace trainer
