// training/token_batch.cc: see token_batch.h.
#include "training/token_batch.h"

#include <algorithm>
#include <string>

#include "policy/sampling.h"

namespace training {

zorplex::Result<std::int64_t> trainable_length(const rollout::Trajectory& t, std::size_t index,
                                               std::int64_t max_seq_len) {
  const std::string name = "trajectory " + std::to_string(index);
  if (t.tokens.size() != t.generated.size() || t.tokens.size() != t.log_probs.size()) {
    return zorplex::Error{name + " has tokens, mask and log-probs of different lengths"};
  }
  auto length = static_cast<std::int64_t>(t.tokens.size());
  if (length > max_seq_len) {
    for (std::int64_t j = max_seq_len; j < length; ++j) {
      if (t.generated[static_cast<std::size_t>(j)] != 0) {
        return zorplex::Error{name + " has " + std::to_string(length) + " tokens, more than max_seq_len " +
                              std::to_string(max_seq_len) + ", and generated tokens past it"};
      }
    }
    length = max_seq_len;
  }
  if (length < 2) return zorplex::Error{name + " has fewer than 2 tokens"};
  return length;
}

zorplex::Result<TokenBatch> make_token_batch(const std::vector<const rollout::Trajectory*>& trajectories,
                                             std::int64_t max_seq_len, torch::Device device) {
  if (trajectories.empty()) return zorplex::Error{"a token batch needs at least one trajectory"};
  std::int64_t longest = 0;
  std::vector<std::int64_t> lengths;
  for (std::size_t b = 0; b < trajectories.size(); ++b) {
    auto length = trainable_length(*trajectories[b], b, max_seq_len);
    if (!length) return length.error();
    lengths.push_back(length.value());
    longest = std::max(longest, length.value());
  }
  const auto batch = static_cast<std::int64_t>(trajectories.size());
  torch::Tensor tokens = torch::full({batch, longest}, policy::kPad, torch::kLong);
  torch::Tensor attention = torch::zeros({batch, longest}, torch::kBool);
  torch::Tensor loss_mask = torch::zeros({batch, longest - 1}, torch::kFloat32);
  torch::Tensor behaviour = torch::zeros({batch, longest - 1}, torch::kFloat32);
  auto tokens_a = tokens.accessor<std::int64_t, 2>();
  auto attention_a = attention.accessor<bool, 2>();
  auto loss_a = loss_mask.accessor<float, 2>();
  auto behaviour_a = behaviour.accessor<float, 2>();
  std::int64_t targets = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const rollout::Trajectory& t = *trajectories[static_cast<std::size_t>(b)];
    for (std::int64_t j = 0; j < lengths[static_cast<std::size_t>(b)]; ++j) {
      const auto k = static_cast<std::size_t>(j);
      tokens_a[b][j] = t.tokens[k];
      attention_a[b][j] = true;
      if (j == 0) continue;
      loss_a[b][j - 1] = t.generated[k] ? 1.0f : 0.0f;
      behaviour_a[b][j - 1] = t.log_probs[k];
      targets += t.generated[k] ? 1 : 0;
    }
  }
  TokenBatch out;
  out.tokens = tokens.to(device);
  out.attention_mask = attention.to(device);
  out.loss_mask = loss_mask.to(device);
  out.behaviour_log_probs = behaviour.to(device);
  out.target_tokens = targets;
  return out;
}

torch::Tensor batch_log_probs(const policy::Transformer& model, const TokenBatch& batch, double temperature) {
  return policy::sequence_log_probs(model, batch.tokens, temperature, batch.attention_mask);
}

torch::Tensor masked_mean_nll(const policy::Transformer& model, const TokenBatch& batch,
                              std::int64_t denominator) {
  const torch::Tensor log_probs = batch_log_probs(model, batch);
  const double count = std::max<std::int64_t>(denominator > 0 ? denominator : batch.target_tokens, 1);
  return -(log_probs * batch.loss_mask).sum() / count;
}

}  // namespace training
