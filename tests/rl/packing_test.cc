// Sequence packing (training/packed_batch.h, Transformer::forward_segments):
// packed log-probs equal the unpacked ones per trajectory, nothing crosses a
// segment (attention, positions, the loss mask), the cut rule is
// make_token_batch's, and the RL update on packed batches is the padded one.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "policy/transformer.h"
#include "training/packed_batch.h"
#include "training/rl_update.h"
#include "training/token_batch.h"

using namespace training;
using rollout::Trajectory;

namespace {

policy::ModelConfig packing_config(policy::PositionEncoding positions) {
  policy::ModelConfig c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_ff = 64;
  c.max_seq_len = 128;
  c.positions = positions;
  return c;
}

policy::Transformer make_model(policy::PositionEncoding positions, std::uint64_t seed) {
  auto model = policy::Transformer::create(packing_config(positions), seed);
  REQUIRE(model.ok());
  return std::move(model).value();
}

// `length` random byte tokens; the first `prompt` are the prompt (not
// generated), the rest generated with behaviour log-prob -5 - their index / 1000.
// prompt 0 marks token 0 generated too (never a target; a test that nothing
// reads it as one).
Trajectory synthetic(std::uint32_t seed, std::size_t length, std::size_t prompt) {
  std::mt19937 rng(seed);
  Trajectory t;
  for (std::size_t j = 0; j < length; ++j) {
    t.tokens.push_back(static_cast<policy::TokenId>(rng() % 256));
    const bool generated = j >= prompt;
    t.generated.push_back(generated ? 1 : 0);
    t.log_probs.push_back(generated ? -5.0f - static_cast<float>(j) / 1000.0f : 0.0f);
  }
  return t;
}

std::vector<const Trajectory*> pointers(const std::vector<Trajectory>& trajectories) {
  std::vector<const Trajectory*> out;
  for (const Trajectory& t : trajectories) out.push_back(&t);
  return out;
}

// Mixed lengths, so that a 128-token row holds several; a third of each the
// prompt, or none (every token generated).
std::vector<Trajectory> mixed(std::uint32_t seed, bool with_prompt = true) {
  const std::vector<std::size_t> lengths = {70, 12, 33, 50, 9, 41, 24, 64, 17, 28};
  std::vector<Trajectory> out;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    out.push_back(
        synthetic(seed + static_cast<std::uint32_t>(i), lengths[i], with_prompt ? lengths[i] / 3 : 0));
  }
  return out;
}

// Each trajectory's log-probs [length - 1] from a forward over it alone.
torch::Tensor alone(const policy::Transformer& model, const Trajectory& t) {
  auto batch = make_token_batch({&t}, model.config().max_seq_len);
  REQUIRE(batch.ok());
  return batch_log_probs(model, batch.value())[0];
}

std::int64_t rows_with_several(const PackedBatch& batch) {
  return (batch.segment_ids.amax(1) > 1).sum().item<std::int64_t>();
}

}  // namespace

TEST_CASE("packing: packed log-probs equal each trajectory's unpacked ones, learned and rotary positions",
          "[rl][training][packing]") {
  const auto positions = GENERATE(policy::PositionEncoding::kLearned, policy::PositionEncoding::kRotary);
  INFO("positions " << policy::position_encoding_name(positions));
  torch::NoGradGuard no_grad;
  const policy::Transformer model = make_model(positions, 11);
  const std::vector<Trajectory> trajectories = mixed(100);
  const std::int64_t row_tokens = GENERATE(0, 128);
  INFO("row_tokens " << row_tokens);
  auto packed = make_packed_batch(pointers(trajectories), PackOptions{128, row_tokens});
  REQUIRE(packed.ok());
  const PackedBatch& batch = packed.value();
  CHECK(rows_with_several(batch) > 0);
  CHECK(batch.tokens.size(0) < static_cast<std::int64_t>(trajectories.size()));
  CHECK(batch.tokens.size(1) <= (row_tokens == 0 ? 70 : 128));
  const torch::Tensor log_probs = packed_log_probs(model, batch);
  for (std::size_t i = 0; i < trajectories.size(); ++i) {
    INFO("trajectory " << i << " at row " << batch.places[i].row << " offset " << batch.places[i].offset);
    const torch::Tensor expected = alone(model, trajectories[i]);
    const torch::Tensor got = trajectory_targets(batch, log_probs, i);
    REQUIRE(got.sizes() == expected.sizes());
    CHECK((got - expected).abs().max().item<double>() < 1e-5);
  }
  // The padded batch of the same trajectories agrees too (the targets it counts).
  auto padded = make_token_batch(pointers(trajectories), 128);
  REQUIRE(padded.ok());
  const torch::Tensor padded_sum = (batch_log_probs(model, padded.value()) * padded.value().loss_mask).sum();
  CHECK((log_probs * batch.loss_mask).sum().item<double>() ==
        Approx(padded_sum.item<double>()).epsilon(1e-5));
  // Real tokens and padding slots add up, and packing wastes fewer than padding.
  const std::int64_t real = padded.value().attention_mask.sum().item<std::int64_t>();
  CHECK(batch.real_tokens == real);
  CHECK(batch.real_tokens + batch.padded_slots == batch.tokens.numel());
  CHECK(batch.padded_slots < padded.value().attention_mask.numel() - real);
}

TEST_CASE("packing: a target across a segment boundary never counts", "[rl][training][packing]") {
  // Every token generated, the first ones too: a boundary target would be 1 if it were read.
  const std::vector<Trajectory> trajectories = mixed(200, false);
  auto packed = make_packed_batch(pointers(trajectories), PackOptions{128, 128});
  REQUIRE(packed.ok());
  const PackedBatch& batch = packed.value();
  REQUIRE(rows_with_several(batch) > 0);
  std::int64_t expected_targets = 0, boundaries = 0;
  auto segments = batch.segment_ids.accessor<std::int64_t, 2>();
  auto mask = batch.loss_mask.accessor<float, 2>();
  auto owner = batch.trajectory_index.accessor<std::int64_t, 2>();
  auto behaviour = batch.behaviour_log_probs.accessor<float, 2>();
  for (const Trajectory& t : trajectories) expected_targets += static_cast<std::int64_t>(t.tokens.size()) - 1;
  for (std::int64_t r = 0; r < batch.tokens.size(0); ++r) {
    for (std::int64_t j = 0; j + 1 < batch.tokens.size(1); ++j) {
      const bool crosses = segments[r][j] != segments[r][j + 1] || segments[r][j] == 0;
      INFO("row " << r << " target " << j);
      if (crosses) {
        boundaries += segments[r][j] != 0 && segments[r][j + 1] != 0 ? 1 : 0;
        CHECK(mask[r][j] == 0.0f);
        CHECK(owner[r][j] == -1);
        CHECK(behaviour[r][j] == 0.0f);
      } else {
        CHECK(mask[r][j] == 1.0f);
        CHECK(owner[r][j] >= 0);
      }
    }
  }
  CHECK(boundaries > 0);
  CHECK(batch.target_tokens == expected_targets);
  CHECK(batch.loss_mask.sum().item<double>() == static_cast<double>(expected_targets));
  // per_target: each target carries its trajectory's value, boundaries and padding 0.
  std::vector<double> values;
  for (std::size_t i = 0; i < trajectories.size(); ++i) values.push_back(static_cast<double>(i + 1));
  const torch::Tensor spread = per_target(batch, torch::tensor(values, torch::kFloat64));
  CHECK(torch::equal(spread == 0, batch.trajectory_index < 0));
  for (std::size_t i = 0; i < trajectories.size(); ++i) {
    CHECK(torch::all(trajectory_targets(batch, spread, i) == static_cast<double>(i + 1)).item<bool>());
  }
}

TEST_CASE("packing: no attention across segments, another sequence of the row changes nothing",
          "[rl][training][packing]") {
  const auto positions = GENERATE(policy::PositionEncoding::kLearned, policy::PositionEncoding::kRotary);
  INFO("positions " << policy::position_encoding_name(positions));
  torch::NoGradGuard no_grad;
  const policy::Transformer model = make_model(positions, 12);
  std::vector<Trajectory> trajectories = {synthetic(1, 40, 10), synthetic(2, 30, 8), synthetic(3, 50, 12)};
  auto before = make_packed_batch(pointers(trajectories), PackOptions{128, 128});
  REQUIRE(before.ok());
  REQUIRE(before.value().tokens.size(0) == 1);  // all three in one row
  const torch::Tensor first = packed_log_probs(model, before.value());
  // The middle sequence (in the row) gets other tokens; the others must not see it.
  std::size_t middle = 0;
  for (std::size_t i = 0; i < trajectories.size(); ++i) {
    if (before.value().places[i].offset > 0 &&
        before.value().places[i].offset + before.value().places[i].length < before.value().tokens.size(1)) {
      middle = i;
    }
  }
  REQUIRE(before.value().places[middle].offset > 0);
  for (auto& token : trajectories[middle].tokens) token = static_cast<policy::TokenId>((token + 101) % 256);
  auto after = make_packed_batch(pointers(trajectories), PackOptions{128, 128});
  REQUIRE(after.ok());
  const torch::Tensor second = packed_log_probs(model, after.value());
  for (std::size_t i = 0; i < trajectories.size(); ++i) {
    INFO("trajectory " << i << (i == middle ? " (changed)" : ""));
    const torch::Tensor a = trajectory_targets(before.value(), first, i);
    const torch::Tensor b = trajectory_targets(after.value(), second, i);
    if (i == middle) {
      CHECK((a - b).abs().max().item<double>() > 1e-3);
    } else {
      CHECK((a - b).abs().max().item<double>() <= 1e-6);
    }
  }
}

TEST_CASE("packing: a row of one sequence is make_token_batch's batch", "[rl][training][packing]") {
  const auto positions = GENERATE(policy::PositionEncoding::kLearned, policy::PositionEncoding::kRotary);
  torch::NoGradGuard no_grad;
  const policy::Transformer model = make_model(positions, 13);
  const Trajectory t = synthetic(7, 45, 15);
  auto packed = make_packed_batch({&t}, PackOptions{128, 0});
  auto padded = make_token_batch({&t}, 128);
  REQUIRE(packed.ok());
  REQUIRE(padded.ok());
  CHECK(torch::equal(packed.value().tokens, padded.value().tokens));
  CHECK(torch::equal(packed.value().segment_ids > 0, padded.value().attention_mask));
  CHECK(torch::equal(packed.value().loss_mask, padded.value().loss_mask));
  CHECK(torch::equal(packed.value().behaviour_log_probs, padded.value().behaviour_log_probs));
  CHECK(packed.value().target_tokens == padded.value().target_tokens);
  CHECK(packed.value().padded_slots == 0);
  const torch::Tensor a = packed_log_probs(model, packed.value());
  const torch::Tensor b = batch_log_probs(model, padded.value());
  CHECK((a - b).abs().max().item<double>() <= 1e-6);
}

TEST_CASE("packing: an over-long trajectory is cut as make_token_batch cuts it, and empty input is an error",
          "[rl][training][packing]") {
  // 150 tokens in a 128-token context: the last 22 an injected result (not generated).
  Trajectory cut = synthetic(8, 150, 10);
  for (std::size_t j = 128; j < 150; ++j) {
    cut.generated[j] = 0;
    cut.log_probs[j] = 0.0f;
  }
  const Trajectory other = synthetic(9, 20, 5);
  auto packed = make_packed_batch({&cut, &other}, PackOptions{128, 128});
  REQUIRE(packed.ok());
  CHECK(packed.value().places[0].length == 128);
  CHECK(packed.value().tokens.size(1) == 128);
  CHECK(packed.value().tokens.size(0) == 2);  // no room beside a full row
  auto padded = make_token_batch({&cut}, 128);
  REQUIRE(padded.ok());
  CHECK(
      torch::equal(packed.value().tokens[packed.value().places[0].row].unsqueeze(0), padded.value().tokens));
  CHECK(packed.value().real_tokens == 128 + 20);
  // A generated token past max_seq_len: the same Error as make_token_batch's.
  Trajectory bad = cut;
  bad.generated[140] = 1;
  auto refused = make_packed_batch({&other, &bad}, PackOptions{128, 0});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("trajectory 1") != std::string::npos);
  CHECK(refused.error().message.find("generated tokens past it") != std::string::npos);
  CHECK(refused.error().message == make_token_batch({&other, &bad}, 128).error().message);
  CHECK_FALSE(make_packed_batch({}, PackOptions{128, 0}).ok());
  const Trajectory one_token = synthetic(10, 1, 0);
  CHECK_FALSE(make_packed_batch({&one_token}, PackOptions{128, 0}).ok());
}

TEST_CASE("RL update: packed and padded batches give the same loss and the same new weights",
          "[rl][training][packing]") {
  const auto positions = GENERATE(policy::PositionEncoding::kLearned, policy::PositionEncoding::kRotary);
  const bool decoupled = GENERATE(false, true);
  INFO("positions " << policy::position_encoding_name(positions) << (decoupled ? " decoupled" : " grpo"));
  const policy::Transformer reference = make_model(positions, 20);
  // The policy: the reference plus noise (so the KL term has a gradient).
  torch::manual_seed(21);
  const torch::Tensor start =
      reference.flat_parameters() + 0.02 * torch::randn_like(reference.flat_parameters());
  // Two groups of mixed lengths; behaviour log-probs the policy's own,
  // shifted, so ratios and behaviour weights leave 1.
  std::vector<algorithms::TrajectoryGroup> groups(2);
  {
    auto policy = policy::Transformer::wrap(packing_config(positions), start.clone());
    REQUIRE(policy.ok());
    torch::NoGradGuard no_grad;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      groups[g].trajectories = mixed(300 + 50 * static_cast<std::uint32_t>(g));
      for (std::size_t i = 0; i < groups[g].trajectories.size(); ++i) {
        Trajectory& t = groups[g].trajectories[i];
        t.score.reward = static_cast<double>((i * 7 + g) % 3);
        const torch::Tensor own = alone(policy.value(), t);
        for (std::size_t j = 1; j < t.tokens.size(); ++j) {
          if (t.generated[j]) t.log_probs[j] = own[static_cast<std::int64_t>(j - 1)].item<float>() - 0.05f;
        }
      }
    }
  }
  auto run = [&](bool pack, RlUpdateReport& report) {
    auto policy = policy::Transformer::wrap(packing_config(positions), start.clone());
    REQUIRE(policy.ok());
    RlUpdateOptions options;
    options.lr = 1e-3;
    options.minibatches = 2;
    options.loss.kl_coef = 0.1;
    options.loss.decoupled = decoupled;
    options.loss.behaviour_weight_cap = decoupled ? 5.0 : 0.0;
    options.pack_sequences = pack;
    RlUpdater updater(policy.value(), options);
    updater.set_reference(&reference);
    auto updated = updater.update(groups);
    REQUIRE(updated.ok());
    report = updated.value();
    return policy.value().flat_parameters().clone();
  };
  RlUpdateReport padded_report, packed_report;
  const torch::Tensor padded = run(false, padded_report);
  const torch::Tensor packed = run(true, packed_report);
  CHECK(packed_report.minibatches == 2);
  CHECK(packed_report.loss == Approx(padded_report.loss).epsilon(1e-4));
  CHECK(packed_report.kl == Approx(padded_report.kl).epsilon(1e-4));
  CHECK(packed_report.kl > 0.0);
  CHECK(packed_report.mean_ratio == Approx(padded_report.mean_ratio).epsilon(1e-5));
  CHECK(packed_report.tokens == padded_report.tokens);
  CHECK(packed_report.real_tokens == padded_report.real_tokens);
  CHECK(packed_report.padded_tokens < padded_report.padded_tokens);
  // Both moved the weights by about lr, and by the same amount to well under it.
  const double moved = (padded - start).abs().max().item<double>();
  const double apart = (packed - padded).abs().max().item<double>();
  INFO("moved " << moved << ", apart " << apart);
  CHECK(moved > 5e-4);
  CHECK(apart < 2e-5);
}
