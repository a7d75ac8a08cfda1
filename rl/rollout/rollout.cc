// rollout/rollout.cc: see rollout.h.
#include "rollout/rollout.h"

#include <chrono>

namespace rollout {

zorplex::Result<std::vector<Trajectory>> run_rollouts(const policy::Transformer& model,
                                                      const std::vector<RolloutRequest>& requests,
                                                      const RolloutOptions& options, RolloutStats* stats) {
  if (options.max_turns < 1) return zorplex::Error{"max_turns must be >= 1"};
  const auto max_seq_len = static_cast<std::size_t>(model.config().max_seq_len);
  std::vector<TrajectoryBuilder> builders;
  builders.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].tools == nullptr)
      return zorplex::Error{"rollout request " + std::to_string(i) + " has no tools"};
    builders.emplace_back(requests[i].task, *requests[i].tools, options.format, options.max_turns);
  }
  RolloutStats local;
  for (int turn = 0;; ++turn) {
    std::vector<std::size_t> rows;  // builder index of each prompt
    std::vector<std::vector<TokenId>> prompts;
    for (std::size_t i = 0; i < builders.size(); ++i) {
      TrajectoryBuilder& builder = builders[i];
      if (builder.over()) continue;
      if (builder.context().size() + 1 >= max_seq_len) {
        builder.truncate();
        continue;
      }
      rows.push_back(i);
      prompts.push_back(builder.context());
    }
    if (rows.empty()) break;
    policy::SamplingOptions sampling = options.sampling;
    sampling.seed = options.sampling.seed * 1000003ULL + static_cast<std::uint64_t>(turn);
    const policy::StopCallback stop = [](std::size_t, std::string_view text) {
      return zorplex::check_turn_stop(text, /*end_of_sequence=*/false) == zorplex::TurnStop::kContinue
                 ? policy::StopDecision::kContinue
                 : policy::StopDecision::kStop;
    };
    const auto start = std::chrono::steady_clock::now();
    auto generations = policy::generate(model, prompts, sampling, stop, options.step_hook);
    local.generation_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++local.generate_calls;
    if (!generations) return generations.error();
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const policy::Generation& g = generations.value()[r];
      local.generated_tokens += g.tokens.size();
      TrajectoryBuilder& builder = builders[rows[r]];
      builder.add_turn(g.tokens, g.log_probs, g.versions);
      if (!builder.over() && g.reason == policy::StopReason::kContextFull) builder.truncate();
    }
  }
  std::vector<Trajectory> trajectories;
  trajectories.reserve(builders.size());
  for (TrajectoryBuilder& builder : builders) trajectories.push_back(builder.finish(options.shaping));
  if (stats != nullptr) *stats = local;
  return trajectories;
}

}  // namespace rollout
