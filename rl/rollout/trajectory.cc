// rollout/trajectory.cc: see trajectory.h.
#include "rollout/trajectory.h"

#include <stdexcept>

namespace rollout {

std::size_t Trajectory::generated_tokens() const {
  std::size_t count = 0;
  for (std::uint8_t g : generated) count += g;
  return count;
}

TrajectoryBuilder::TrajectoryBuilder(const zorplex::Task& task, const zorplex::Toolbox& tools,
                                     const policy::PromptFormat& format, int max_turns)
    : tools_(&tools), episode_(tools, max_turns) {
  trajectory_.task = task;
  trajectory_.tokens = policy::encode_prompt(format, task.question);
  trajectory_.prompt_tokens = trajectory_.tokens.size();
  trajectory_.generated.assign(trajectory_.tokens.size(), 0);
  trajectory_.log_probs.assign(trajectory_.tokens.size(), 0.0f);
}

bool TrajectoryBuilder::add_turn(const std::vector<TokenId>& tokens, const std::vector<float>& log_probs) {
  if (tokens.size() != log_probs.size()) {
    throw std::invalid_argument("TrajectoryBuilder::add_turn: " + std::to_string(tokens.size()) +
                                " tokens but " + std::to_string(log_probs.size()) + " log-probs");
  }
  if (over()) return true;
  trajectory_.tokens.insert(trajectory_.tokens.end(), tokens.begin(), tokens.end());
  trajectory_.generated.insert(trajectory_.generated.end(), tokens.size(), 1);
  trajectory_.log_probs.insert(trajectory_.log_probs.end(), log_probs.begin(), log_probs.end());
  const zorplex::Episode::TurnOutcome outcome = episode_.add_turn(policy::decode(tokens));
  if (!outcome.injection.empty()) {
    const std::vector<TokenId> injected = policy::encode(outcome.injection);
    trajectory_.tokens.insert(trajectory_.tokens.end(), injected.begin(), injected.end());
    trajectory_.generated.insert(trajectory_.generated.end(), injected.size(), 0);
    trajectory_.log_probs.insert(trajectory_.log_probs.end(), injected.size(), 0.0f);
  }
  return over();
}

void TrajectoryBuilder::truncate() {
  if (!over()) trajectory_.truncated = true;
}

Trajectory TrajectoryBuilder::finish(zorplex::Shaping shaping) {
  trajectory_.transcript = episode_.transcript();
  trajectory_.turns = episode_.turns();
  trajectory_.end = episode_.end();
  trajectory_.score = zorplex::score_episode(tools_->kind(), trajectory_.task.answer, trajectory_.transcript,
                                             episode_.calls(), shaping);
  return trajectory_;
}

}  // namespace rollout
