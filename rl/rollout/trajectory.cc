// rollout/trajectory.cc: see trajectory.h.
#include "rollout/trajectory.h"

#include <algorithm>
#include <stdexcept>

namespace rollout {

std::size_t Trajectory::generated_tokens() const {
  std::size_t count = 0;
  for (std::uint8_t g : generated) count += g;
  return count;
}

std::uint64_t Trajectory::oldest_version() const {
  std::uint64_t oldest = 0;
  bool any = false;
  for (std::size_t i = 0; i < generated.size() && i < token_versions.size(); ++i) {
    if (generated[i] == 0) continue;
    oldest = any ? std::min(oldest, token_versions[i]) : token_versions[i];
    any = true;
  }
  return oldest;
}

std::uint64_t Trajectory::newest_version() const {
  std::uint64_t newest = 0;
  for (std::size_t i = 0; i < generated.size() && i < token_versions.size(); ++i) {
    if (generated[i] != 0) newest = std::max(newest, token_versions[i]);
  }
  return newest;
}

TrajectoryBuilder::TrajectoryBuilder(const zorplex::Task& task, const zorplex::Toolbox& tools,
                                     const policy::PromptFormat& format, int max_turns)
    : tools_(&tools), episode_(tools, max_turns) {
  trajectory_.task = task;
  trajectory_.tokens = policy::encode_prompt(format, task.question);
  trajectory_.prompt_tokens = trajectory_.tokens.size();
  trajectory_.generated.assign(trajectory_.tokens.size(), 0);
  trajectory_.log_probs.assign(trajectory_.tokens.size(), 0.0f);
  trajectory_.token_versions.assign(trajectory_.tokens.size(), 0);
}

bool TrajectoryBuilder::add_turn(const std::vector<TokenId>& tokens, const std::vector<float>& log_probs,
                                 const std::vector<std::uint64_t>& versions) {
  if (tokens.size() != log_probs.size() || (!versions.empty() && versions.size() != tokens.size())) {
    throw std::invalid_argument("TrajectoryBuilder::add_turn: " + std::to_string(tokens.size()) +
                                " tokens but " + std::to_string(log_probs.size()) + " log-probs and " +
                                std::to_string(versions.size()) + " versions");
  }
  if (over()) return true;
  trajectory_.tokens.insert(trajectory_.tokens.end(), tokens.begin(), tokens.end());
  trajectory_.generated.insert(trajectory_.generated.end(), tokens.size(), 1);
  trajectory_.log_probs.insert(trajectory_.log_probs.end(), log_probs.begin(), log_probs.end());
  if (versions.empty()) {
    trajectory_.token_versions.insert(trajectory_.token_versions.end(), tokens.size(), 0);
  } else {
    trajectory_.token_versions.insert(trajectory_.token_versions.end(), versions.begin(), versions.end());
  }
  const zorplex::Episode::TurnOutcome outcome = episode_.add_turn(policy::decode(tokens));
  if (!outcome.injection.empty()) {
    const std::vector<TokenId> injected = policy::encode(outcome.injection);
    trajectory_.tokens.insert(trajectory_.tokens.end(), injected.begin(), injected.end());
    trajectory_.generated.insert(trajectory_.generated.end(), injected.size(), 0);
    trajectory_.log_probs.insert(trajectory_.log_probs.end(), injected.size(), 0.0f);
    trajectory_.token_versions.insert(trajectory_.token_versions.end(), injected.size(), 0);
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
