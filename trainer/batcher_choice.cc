// trainer/batcher_choice.cc: see batcher_choice.h.
#include "trainer/batcher_choice.h"

#include <algorithm>
#include <cmath>

namespace trainer {

zorplex::Result<algorithms::BatcherOptions> batcher_options_from_flags(const BatcherFlags& flags) {
  algorithms::BatcherOptions options;
  if (flags.token_budget < 0)
    return zorplex::Error{"--token-budget " + std::to_string(flags.token_budget) +
                          ": must be a number of tokens >= 0 (0: off, batches by --batch-groups)"};
  options.token_budget = static_cast<std::uint64_t>(flags.token_budget);
  auto fractions = algorithms::parse_env_fractions(flags.env_fractions);
  if (!fractions) return zorplex::Error{"--env-fractions: " + fractions.error().message};
  options.fractions = fractions.value();
  if (!(flags.spill_wait_s >= 0.0) || !std::isfinite(flags.spill_wait_s))
    return zorplex::Error{"--spill-wait: must be a number of seconds >= 0"};
  if (options.token_budget == 0 && !options.fractions.empty())
    return zorplex::Error{"--env-fractions needs --token-budget (without it batches are counted in groups)"};
  if (options.token_budget == 0 && flags.spill_wait_given)
    return zorplex::Error{"--spill-wait needs --token-budget (without it batches are counted in groups)"};
  if (flags.sync && flags.spill_wait_given)
    return zorplex::Error{
        "--spill-wait: sync mode never waits for an environment (the round decides what arrives; "
        "--token-budget only caps what of it is trained on)"};
  options.spill_wait_s = std::min(flags.spill_wait_s, flags.idle_timeout_s);
  return options;
}

zorplex::Result<bool> check_token_budget(algorithms::BatcherOptions& options, std::uint64_t max_seq_len) {
  options.max_seq_len = max_seq_len;
  const std::string problem = options.validate();
  if (!problem.empty()) return zorplex::Error{"--token-budget: " + problem};
  return true;
}

}  // namespace trainer
