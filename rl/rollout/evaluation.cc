// rollout/evaluation.cc: see evaluation.h.
#include "rollout/evaluation.h"

#include <algorithm>
#include <chrono>

namespace rollout {

zorplex::Result<EvalResult> evaluate(const policy::Transformer& model, const EvalOptions& options,
                                     const EvalProgress& progress) {
  if (options.count < 0) return zorplex::Error{"the task count must be >= 0"};
  if (options.batch_size < 1) return zorplex::Error{"the batch size must be >= 1"};
  const auto start = std::chrono::steady_clock::now();
  zorplex::TaskGenerator generator(options.kind, options.difficulty, options.seed);
  std::vector<RolloutRequest> requests;
  requests.reserve(static_cast<std::size_t>(options.count));
  for (int i = 0; i < options.count; ++i)
    requests.push_back(RolloutRequest{generator.next(), &generator.tools()});

  EvalResult result;
  std::uint64_t tokens = 0;
  double seconds = 0.0;
  for (std::size_t begin = 0; begin < requests.size();
       begin += static_cast<std::size_t>(options.batch_size)) {
    const std::size_t end = std::min(requests.size(), begin + static_cast<std::size_t>(options.batch_size));
    const std::vector<RolloutRequest> batch(requests.begin() + static_cast<std::ptrdiff_t>(begin),
                                            requests.begin() + static_cast<std::ptrdiff_t>(end));
    RolloutOptions rollout_options = options.rollout;
    rollout_options.sampling.seed = options.rollout.sampling.seed + begin;
    RolloutStats stats;
    auto trajectories = run_rollouts(model, batch, rollout_options, &stats);
    if (!trajectories) return trajectories.error();
    tokens += stats.generated_tokens;
    seconds += stats.generation_seconds;
    for (Trajectory& t : trajectories.value()) result.trajectories.push_back(std::move(t));
    if (progress) progress(static_cast<int>(end), options.count);
  }
  result.summary = summarize(result.trajectories, tokens, seconds);
  result.summary.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace rollout
