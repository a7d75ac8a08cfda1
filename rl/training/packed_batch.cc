// training/packed_batch.cc: see packed_batch.h.
#include "training/packed_batch.h"

#include <algorithm>
#include <numeric>

#include "policy/sampling.h"
#include "training/token_batch.h"

namespace training {

namespace {

// First-fit decreasing: each trajectory's row and offset; returns the rows' fill.
std::vector<std::int64_t> place_rows(const std::vector<std::int64_t>& lengths, std::int64_t capacity,
                                     std::vector<PackedPlace>& places) {
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::int64_t> fill;
  places.assign(lengths.size(), PackedPlace{});
  for (std::size_t i : order) {
    std::size_t row = 0;
    while (row < fill.size() && fill[row] + lengths[i] > capacity) ++row;
    if (row == fill.size()) fill.push_back(0);
    places[i] = PackedPlace{static_cast<std::int64_t>(row), fill[row], lengths[i]};
    fill[row] += lengths[i];
  }
  return fill;
}

}  // namespace

zorplex::Result<PackedBatch> make_packed_batch(const std::vector<const rollout::Trajectory*>& trajectories,
                                               const PackOptions& options, torch::Device device) {
  if (trajectories.empty()) return zorplex::Error{"a packed batch needs at least one trajectory"};
  std::vector<std::int64_t> lengths;
  for (std::size_t i = 0; i < trajectories.size(); ++i) {
    auto length = trainable_length(*trajectories[i], i, options.max_seq_len);
    if (!length) return length.error();
    lengths.push_back(length.value());
  }
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const std::int64_t capacity = std::min(std::max(options.row_tokens, longest), options.max_seq_len);
  PackedBatch out;
  const std::vector<std::int64_t> fill = place_rows(lengths, capacity, out.places);
  const auto rows = static_cast<std::int64_t>(fill.size());
  const std::int64_t width = *std::max_element(fill.begin(), fill.end());

  torch::Tensor tokens = torch::full({rows, width}, policy::kPad, torch::kLong);
  torch::Tensor segments = torch::zeros({rows, width}, torch::kLong);
  torch::Tensor loss_mask = torch::zeros({rows, width - 1}, torch::kFloat32);
  torch::Tensor behaviour = torch::zeros({rows, width - 1}, torch::kFloat32);
  torch::Tensor owner = torch::full({rows, width - 1}, -1, torch::kLong);
  auto tokens_a = tokens.accessor<std::int64_t, 2>();
  auto segments_a = segments.accessor<std::int64_t, 2>();
  auto loss_a = loss_mask.accessor<float, 2>();
  auto behaviour_a = behaviour.accessor<float, 2>();
  auto owner_a = owner.accessor<std::int64_t, 2>();
  std::vector<std::int64_t> next_segment(fill.size(), 1);
  for (std::size_t i = 0; i < trajectories.size(); ++i) {
    const rollout::Trajectory& t = *trajectories[i];
    const PackedPlace& place = out.places[i];
    const std::int64_t segment = next_segment[static_cast<std::size_t>(place.row)]++;
    const std::int64_t r = place.row;
    for (std::int64_t j = 0; j < place.length; ++j) {
      const auto k = static_cast<std::size_t>(j);
      const std::int64_t at = place.offset + j;
      tokens_a[r][at] = t.tokens[k];
      segments_a[r][at] = segment;
      if (j == 0) continue;
      // Target at - 1 (token `at` given the ones before it) is this sequence's.
      loss_a[r][at - 1] = t.generated[k] ? 1.0f : 0.0f;
      behaviour_a[r][at - 1] = t.log_probs[k];
      owner_a[r][at - 1] = static_cast<std::int64_t>(i);
      out.target_tokens += t.generated[k] ? 1 : 0;
    }
    out.real_tokens += place.length;
  }
  out.padded_slots = rows * width - out.real_tokens;
  out.tokens = tokens.to(device);
  out.segment_ids = segments.to(device);
  out.loss_mask = loss_mask.to(device);
  out.behaviour_log_probs = behaviour.to(device);
  out.trajectory_index = owner.to(device);
  return out;
}

torch::Tensor per_target(const PackedBatch& batch, const torch::Tensor& values) {
  const torch::Tensor owner = batch.trajectory_index;
  const torch::Tensor picked =
      values.to(owner.device()).index_select(0, owner.clamp_min(0).flatten()).view(owner.sizes());
  return picked * (owner >= 0).to(picked.dtype());
}

torch::Tensor trajectory_targets(const PackedBatch& batch, const torch::Tensor& per_target_values,
                                 std::size_t index) {
  const PackedPlace& place = batch.places.at(index);
  return per_target_values[place.row].narrow(0, place.offset, place.length - 1);
}

torch::Tensor packed_log_probs(const policy::Transformer& model, const PackedBatch& batch,
                               double temperature) {
  const std::int64_t width = batch.tokens.size(1);
  torch::Tensor logits = model.forward_segments(batch.tokens, batch.segment_ids);
  torch::Tensor targets = batch.tokens.narrow(1, 1, width - 1).to(logits.device());
  return policy::token_log_probs(logits.narrow(1, 0, width - 1), targets, temperature);
}

}  // namespace training
