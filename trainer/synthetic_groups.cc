#include "trainer/synthetic_groups.h"

#include <algorithm>
#include <cmath>

namespace trainer {

SyntheticGroups::SyntheticGroups(SyntheticGroupOptions options, std::int64_t vocab_size, std::int64_t max_seq_len)
    : options_(options),
      vocab_size_(std::max<std::int64_t>(vocab_size, 2)),
      length_(static_cast<std::size_t>(
          std::min<std::int64_t>(options.prompt_tokens + options.generated_tokens, std::max<std::int64_t>(max_seq_len, 2)))),
      prompt_(std::min(static_cast<std::size_t>(std::max(options.prompt_tokens, 1)), length_ - 1)),
      rng_(options.seed),
      tasks_(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium, static_cast<std::int64_t>(options.seed)) {}

std::vector<algorithms::TrajectoryGroup> SyntheticGroups::next(std::uint64_t version) {
  const float uniform_log_prob = -static_cast<float>(std::log(static_cast<double>(vocab_size_)));
  std::uniform_int_distribution<std::int64_t> token(0, vocab_size_ - 1);
  std::vector<algorithms::TrajectoryGroup> out;
  for (int g = 0; g < options_.groups; ++g) {
    algorithms::TrajectoryGroup group;
    const zorplex::Task task = tasks_.next();
    for (int i = 0; i < options_.group_size; ++i) {
      rollout::Trajectory t;
      t.task = task;
      t.prompt_tokens = prompt_;
      for (std::size_t j = 0; j < length_; ++j) {
        const bool generated = j >= prompt_;
        t.tokens.push_back(static_cast<policy::TokenId>(token(rng_)));
        t.generated.push_back(generated ? 1 : 0);
        t.log_probs.push_back(generated ? uniform_log_prob : 0.0f);
        t.token_versions.push_back(generated ? version : 0);
      }
      const bool correct = i % 2 == 0;
      t.score.correct = correct;
      t.score.has_answer_tag = true;
      t.score.failure_mode = correct ? zorplex::FailureMode::kSuccess : zorplex::FailureMode::kWrongAnswer;
      t.score.reward = correct ? 1.0 : 0.0;
      t.turns = 1;
      t.end = zorplex::EpisodeEnd::kAnswered;
      group.trajectories.push_back(std::move(t));
    }
    group.version_start = version;
    group.version_end = version;
    group.sequence = sequence_++;
    group.task_seed = options_.seed;
    group.task_index = group.sequence;
    group.temperature = options_.temperature;
    out.push_back(std::move(group));
  }
  return out;
}

}  // namespace trainer
