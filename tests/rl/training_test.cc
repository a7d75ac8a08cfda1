// Training the policy (libtorch): token batches and the masked loss, AdamW
// over the flat buffer (checked against torch's AdamW), SFT that learns the
// tool protocol, multi-turn rollouts whose recorded log-probs a teacher-forced
// recomputation reproduces, checkpoints that resume exactly, evaluation.
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "policy/safetensors.h"
#include "policy/sampling.h"
#include "rollout/demonstrations.h"
#include "rollout/evaluation.h"
#include "rollout/rollout.h"
#include "training/flat_adamw.h"
#include "training/policy_loss.h"
#include "training/rl_update.h"
#include "training/sft.h"
#include "training/token_batch.h"

using namespace training;
using rollout::Trajectory;

namespace {

[[maybe_unused]] const bool kThreadsSet = [] {
  torch::set_num_threads(2);
  return true;
}();

policy::ModelConfig tiny_config() {
  policy::ModelConfig c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_ff = 64;
  c.max_seq_len = 256;
  return c;
}

policy::PromptFormat short_prompt() {
  policy::PromptFormat format;
  format.system_prompt = "Use LOOKUP.";
  return format;
}

SftOptions tiny_sft(int steps) {
  SftOptions o;
  o.model = tiny_config();
  o.init_seed = 3;
  o.data.format = short_prompt();
  o.data.imperfect_fraction = 0.0;
  o.data.arithmetic = rollout::Arithmetic::kPlain;  // short answers: the protocol is what these tests need
  o.steps = steps;
  o.batch_size = 16;
  o.lr = 1e-2;
  o.warmup_steps = 10;
  return o;
}

std::unique_ptr<SftTrainer> make_trainer(const SftOptions& options) {
  auto trainer = SftTrainer::create(options);
  REQUIRE(trainer.ok());
  return std::move(trainer).value();
}

// Trains until done; returns the mean loss of the first and last 10 steps.
std::pair<double, double> train(SftTrainer& trainer) {
  std::vector<double> losses;
  while (trainer.completed_steps() < trainer.options().steps) {
    auto report = trainer.step();
    REQUIRE(report.ok());
    REQUIRE(report.value().applied);
    losses.push_back(report.value().loss);
  }
  REQUIRE(losses.size() >= 20);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += losses[static_cast<std::size_t>(i)] / 10;
    last += losses[losses.size() - 1 - static_cast<std::size_t>(i)] / 10;
  }
  return {first, last};
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("ws_training_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

bool bit_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                                               static_cast<std::size_t>(a.numel() * a.element_size())) == 0;
}

}  // namespace

TEST_CASE("token batch: right padding, the shifted loss mask and behaviour log-probs", "[rl][training]") {
  rollout::DemonstrationOptions data;
  data.format = short_prompt();
  const rollout::DemonstrationStream stream(data);
  Trajectory a = stream.at(0);
  Trajectory b = stream.at(1);
  for (std::size_t i = 0; i < a.log_probs.size(); ++i) a.log_probs[i] = a.generated[i] ? -0.25f : 0.0f;
  auto batch = make_token_batch({&a, &b}, 256);
  REQUIRE(batch.ok());
  const TokenBatch& t = batch.value();
  const auto longest = static_cast<std::int64_t>(std::max(a.tokens.size(), b.tokens.size()));
  CHECK(t.tokens.sizes() == torch::IntArrayRef({2, longest}));
  CHECK(t.loss_mask.sizes() == torch::IntArrayRef({2, longest - 1}));
  CHECK(t.target_tokens == static_cast<std::int64_t>(a.generated_tokens() + b.generated_tokens()));
  for (std::size_t j = 1; j < a.tokens.size(); ++j) {
    const auto k = static_cast<std::int64_t>(j);
    CHECK(t.tokens[0][k].item<std::int64_t>() == a.tokens[j]);
    CHECK(t.loss_mask[0][k - 1].item<float>() == (a.generated[j] ? 1.0f : 0.0f));
    CHECK(t.behaviour_log_probs[0][k - 1].item<float>() == a.log_probs[j]);
  }
  const auto shorter = static_cast<std::int64_t>(std::min(a.tokens.size(), b.tokens.size()));
  const std::int64_t row = a.tokens.size() < b.tokens.size() ? 0 : 1;
  if (shorter < longest) {
    CHECK_FALSE(t.attention_mask[row][shorter].item<bool>());
    CHECK(t.tokens[row][shorter].item<std::int64_t>() == policy::kPad);
    CHECK(t.loss_mask[row].narrow(0, shorter - 1, longest - shorter).sum().item<float>() == 0.0f);
  }

  // Cutting at max_seq_len is allowed only through masked tokens.
  Trajectory long_one = a;
  long_one.tokens.insert(long_one.tokens.end(), 20, 'x');
  long_one.generated.insert(long_one.generated.end(), 20, 0);
  long_one.log_probs.insert(long_one.log_probs.end(), 20, 0.0f);
  const auto limit = static_cast<std::int64_t>(a.tokens.size() + 5);
  auto cut = make_token_batch({&long_one}, limit);
  REQUIRE(cut.ok());
  CHECK(cut.value().tokens.size(1) == limit);
  long_one.generated.back() = 1;
  auto refused = make_token_batch({&long_one}, limit);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("generated tokens past it") != std::string::npos);
  CHECK_FALSE(make_token_batch({}, 256).ok());
}

TEST_CASE("masked loss: the mean over masked-in targets only", "[rl][training]") {
  auto model = policy::Transformer::create(tiny_config(), 5);
  REQUIRE(model.ok());
  rollout::DemonstrationOptions data;
  data.format = short_prompt();
  const rollout::DemonstrationStream stream(data);
  const Trajectory a = stream.at(0);
  auto batch = make_token_batch({&a}, 256);
  REQUIRE(batch.ok());
  torch::NoGradGuard no_grad;
  const double loss = masked_mean_nll(model.value(), batch.value()).item<double>();
  torch::Tensor all =
      policy::sequence_log_probs(model.value(), torch::tensor(a.tokens, torch::kLong).unsqueeze(0), 1.0)[0];
  double sum = 0.0;
  int count = 0;
  for (std::size_t j = 1; j < a.tokens.size(); ++j) {
    if (!a.generated[j]) continue;
    sum -= all[static_cast<std::int64_t>(j - 1)].item<double>();
    ++count;
  }
  REQUIRE(count > 0);
  CHECK(loss == Approx(sum / count).epsilon(1e-5));
}

TEST_CASE("flat AdamW: one step equals torch's AdamW on the same gradient", "[rl][training]") {
  AdamWOptions options;
  options.weight_decay = 0.1;
  options.max_grad_norm = 0.0;  // torch's optimizer does not clip
  auto ours = policy::Transformer::create(tiny_config(), 8);
  auto theirs = policy::Transformer::create(tiny_config(), 8);
  REQUIRE(ours.ok());
  REQUIRE(theirs.ok());
  // Torch's AdamW decays every parameter of a group: decay matrices, not vectors.
  std::vector<torch::Tensor> matrices, vectors;
  for (std::size_t i = 0; i < theirs.value().parameters().size(); ++i) {
    (theirs.value().specs()[i].shape.size() >= 2 ? matrices : vectors)
        .push_back(theirs.value().parameters()[i]);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(matrices,
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(vectors,
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(1e-2));
  FlatAdamW flat(ours.value(), options);
  const torch::Tensor tokens = torch::randint(0, 256, {2, 20}, torch::kLong);
  for (int step = 0; step < 3; ++step) {
    // One backward pass, its gradient copied: two passes may differ in the last
    // bits (threaded reductions), and Adam turns a near-zero gradient's sign
    // into a full lr-sized step, so "the same gradient" must be the same bits.
    ours.value().zero_grad();
    ours.value().forward(tokens).pow(2).mean().backward();
    theirs.value().zero_grad();
    for (std::size_t i = 0; i < theirs.value().parameters().size(); ++i) {
      const torch::Tensor& g = ours.value().parameters()[i].grad();
      REQUIRE(g.defined());
      theirs.value().parameters()[i].mutable_grad() = g.detach().clone();
    }
    const StepResult result = flat.step(1e-2);
    CHECK(result.applied);
    reference.step();
  }
  CHECK(flat.state().step == 3);
  CHECK(torch::allclose(ours.value().flat_parameters(), theirs.value().flat_parameters(), 1e-5, 1e-6));
  CHECK_FALSE(bit_equal(ours.value().flat_parameters(),
                        policy::Transformer::create(tiny_config(), 8).value().flat_parameters()));
}

TEST_CASE("flat AdamW: a non-finite gradient skips the update, and clipping bounds the step",
          "[rl][training]") {
  auto model = policy::Transformer::create(tiny_config(), 2);
  REQUIRE(model.ok());
  FlatAdamW optimizer(model.value(), AdamWOptions{});
  const torch::Tensor before = model.value().flat_parameters().clone();
  model.value().parameters()[0].mutable_grad() = torch::full_like(model.value().parameters()[0], NAN);
  const StepResult skipped = optimizer.step(1e-2);
  CHECK_FALSE(skipped.applied);
  CHECK(optimizer.state().step == 0);
  CHECK(bit_equal(before, model.value().flat_parameters()));
  model.value().parameters()[0].mutable_grad() = torch::full_like(model.value().parameters()[0], 100.0);
  const StepResult clipped = optimizer.step(1e-2);
  CHECK(clipped.applied);
  CHECK(clipped.grad_norm > 100.0);
  CHECK(optimizer.state().exp_avg.norm().item<double>() ==
        Approx(0.1).epsilon(1e-3));  // (1 - b1) * clipped 1.0
  AdamWState wrong;
  wrong.exp_avg = torch::zeros({3});
  wrong.exp_avg_sq = torch::zeros({3});
  CHECK_FALSE(optimizer.load_state(wrong).ok());
}

TEST_CASE(
    "SFT: the loss falls and rollouts follow the tool protocol, and their log-probs match teacher forcing",
    "[rl][training][rollout]") {
  auto trainer = make_trainer(tiny_sft(150));
  const auto [first, last] = train(*trainer);
  INFO("loss first 10 steps " << first << ", last 10 " << last);
  CHECK(last < 0.5 * first);

  // Sampled (temperature 1) multi-turn rollouts on held-out tasks.
  zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 42);
  std::vector<rollout::RolloutRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back({generator.next(), &generator.tools()});
  rollout::RolloutOptions options;
  options.format = short_prompt();
  options.sampling.seed = 5;
  rollout::RolloutStats stats;
  auto result = rollout::run_rollouts(trainer->model(), requests, options, &stats);
  REQUIRE(result.ok());
  const std::vector<Trajectory>& trajectories = result.value();
  REQUIRE(trajectories.size() == 8);
  int multi_turn = 0;
  std::uint64_t generated = 0;
  for (const Trajectory& t : trajectories) {
    generated += t.generated_tokens();
    multi_turn += t.turns >= 2 ? 1 : 0;
    CHECK(t.score.tool_calls == t.turns - (t.end == zorplex::EpisodeEnd::kTurnLimit ? 0 : 1));
  }
  CHECK(stats.generated_tokens == generated);
  CHECK(stats.generate_calls >= 2);
  // The SFT policy calls tools: most episodes have a tool result injected.
  INFO("episodes with two or more turns: " << multi_turn << " of 8");
  CHECK(multi_turn >= 4);

  // Teacher forcing over each whole trajectory (prompt, turns, injected
  // results) reproduces every recorded behaviour log-prob.
  std::vector<const Trajectory*> pointers;
  for (const Trajectory& t : trajectories) pointers.push_back(&t);
  auto batch = make_token_batch(pointers, trainer->options().model.max_seq_len);
  REQUIRE(batch.ok());
  torch::NoGradGuard no_grad;
  const torch::Tensor recomputed = batch_log_probs(trainer->model(), batch.value(), 1.0);
  const torch::Tensor diff =
      ((recomputed - batch.value().behaviour_log_probs).abs() * batch.value().loss_mask).max();
  CHECK(diff.item<float>() < 1e-4);
  CHECK(batch.value().loss_mask.sum().item<float>() == static_cast<float>(generated));

  // Greedy evaluation: a plain summary of what the policy does.
  rollout::EvalOptions eval;
  eval.count = 6;
  eval.batch_size = 4;
  eval.rollout.format = short_prompt();
  auto evaluated = rollout::evaluate(trainer->model(), eval);
  REQUIRE(evaluated.ok());
  CHECK(evaluated.value().summary.tasks == 6);
  CHECK(evaluated.value().trajectories.size() == 6);
  CHECK(evaluated.value().summary.generated_tokens > 0);
  CHECK(evaluated.value().summary.avg_tool_calls > 0.5);
}

TEST_CASE("SFT: a resumed run ends bit-identical to an uninterrupted one", "[rl][training]") {
  SftOptions options = tiny_sft(6);
  options.batch_size = 4;
  options.data.imperfect_fraction = 0.3;
  auto straight = make_trainer(options);
  for (int i = 0; i < 6; ++i) REQUIRE(straight->step().ok());

  const auto dir = temp_dir("resume");
  auto first_half = make_trainer(options);
  for (int i = 0; i < 3; ++i) REQUIRE(first_half->step().ok());
  REQUIRE(first_half->save(dir.string()).ok());
  auto resumed = SftTrainer::resume(dir.string());
  REQUIRE(resumed.ok());
  SftTrainer& second_half = *resumed.value();
  CHECK(second_half.completed_steps() == 3);
  CHECK(second_half.options().to_json() == options.to_json());
  for (int i = 0; i < 3; ++i) REQUIRE(second_half.step().ok());
  CHECK(bit_equal(straight->model().flat_parameters(), second_half.model().flat_parameters()));

  // The policy file is a plain policy checkpoint with the SFT step in its metadata.
  REQUIRE(second_half.save(dir.string()).ok());
  auto loaded = policy::load_model(policy_file(dir.string()));
  REQUIRE(loaded.ok());
  CHECK(bit_equal(loaded.value().flat_parameters(), straight->model().flat_parameters()));
  CHECK(policy::read_safetensors(policy_file(dir.string())).value().metadata.at("sft.step") == "6");
  std::filesystem::remove_all(dir);
}

TEST_CASE("SFT: resume refuses a torn or foreign checkpoint with a clear error", "[rl][training]") {
  const auto dir = temp_dir("torn");
  SftOptions options = tiny_sft(4);
  options.batch_size = 2;
  auto trainer = make_trainer(options);
  REQUIRE(trainer->step().ok());
  REQUIRE(trainer->save(dir.string()).ok());
  const auto old_optimizer = dir / "old_optimizer.safetensors";
  std::filesystem::copy_file(optimizer_file(dir.string()), old_optimizer);
  REQUIRE(trainer->step().ok());
  REQUIRE(trainer->save(dir.string()).ok());
  // A save cut between its two files: the optimizer is a step behind.
  std::filesystem::copy_file(old_optimizer, optimizer_file(dir.string()),
                             std::filesystem::copy_options::overwrite_existing);
  auto torn = SftTrainer::resume(dir.string());
  REQUIRE_FALSE(torn.ok());
  CHECK(torn.error().message.find("different steps") != std::string::npos);

  // A policy saved without SFT metadata.
  const auto plain = temp_dir("plain");
  REQUIRE(policy::save_model(policy_file(plain.string()), trainer->model()).ok());
  auto foreign = SftTrainer::resume(plain.string());
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.error().message.find("not an SFT checkpoint") != std::string::npos);

  auto missing = SftTrainer::resume((dir / "nowhere").string());
  REQUIRE_FALSE(missing.ok());
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(plain);
}

TEST_CASE("SFT: micro-batches of similar lengths give the one padded batch's loss and update",
          "[rl][training]") {
  // Demonstrations of medium tasks differ in length (a product's working is
  // long); 4 length groups of 2 must train exactly like one batch of 8 to
  // rounding: the same loss, and the same parameters after 3 steps.
  SftOptions options = tiny_sft(3);
  options.batch_size = 8;
  options.data.mix = {rollout::TaskMix{zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium}};
  options.data.arithmetic = rollout::Arithmetic::kColumns;
  options.model.max_seq_len = 384;
  options.length_groups = 1;
  auto whole = make_trainer(options);
  options.length_groups = 4;
  auto grouped = make_trainer(options);
  std::size_t shortest = SIZE_MAX, longest = 0;
  for (std::uint64_t i = 0; i < 8; ++i) {
    shortest = std::min(shortest, grouped->data().at(i).tokens.size());
    longest = std::max(longest, grouped->data().at(i).tokens.size());
  }
  INFO("first batch: " << shortest << " to " << longest << " tokens");
  REQUIRE(longest > shortest + 20);  // the groups do pad less
  const torch::Tensor before = whole->model().flat_parameters().clone();
  for (int i = 0; i < 3; ++i) {
    auto a = whole->step();
    auto b = grouped->step();
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(b.value().loss == Approx(a.value().loss).epsilon(1e-5));
    CHECK(b.value().target_tokens == a.value().target_tokens);
    CHECK(b.value().tokens == a.value().tokens);
  }
  const torch::Tensor moved = (whole->model().flat_parameters() - before).abs().max();
  const torch::Tensor differ = (whole->model().flat_parameters() - grouped->model().flat_parameters()).abs().max();
  INFO("largest parameter move " << moved.item<float>() << ", largest difference " << differ.item<float>());
  CHECK(moved.item<float>() > 1e-3);
  CHECK(differ.item<float>() < 1e-3 * moved.item<float>());
  // Checkpoints from before length groups padded the batch as one.
  nlohmann::json old = nlohmann::json::parse(options.to_json());
  CHECK(old.at("length_groups") == 4);
  old.erase("length_groups");
  auto parsed = SftOptions::from_json(old.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed.value().length_groups == 1);
}

TEST_CASE("SFT: length groups on 2 workers give the 1-worker update bit for bit", "[rl][training]") {
  // Each group's gradients are kept apart and added in group order, so with
  // one torch thread per worker (and for the serial trainer) the worker count
  // must not change a single bit of the loss or the parameters.
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  SftOptions options = tiny_sft(3);
  options.batch_size = 8;
  options.length_groups = 4;
  options.data.mix = {rollout::TaskMix{zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium}};
  options.data.arithmetic = rollout::Arithmetic::kColumns;
  options.model.max_seq_len = 384;
  auto serial = make_trainer(options);
  auto parallel = make_trainer(options);
  parallel->set_workers(2);
  CHECK(parallel->workers() == 2);
  const torch::Tensor before = serial->model().flat_parameters().clone();
  for (int i = 0; i < 3; ++i) {
    auto a = serial->step();
    auto b = parallel->step();
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(b.value().loss == a.value().loss);
    CHECK(b.value().grad_norm == a.value().grad_norm);
  }
  CHECK((serial->model().flat_parameters() - before).abs().max().item<float>() > 1e-3);
  CHECK(torch::equal(serial->model().flat_parameters(), parallel->model().flat_parameters()));
  torch::set_num_threads(threads);
}

TEST_CASE("SFT: options round trip through JSON and bad ones are named", "[rl][training]") {
  SftOptions options = tiny_sft(10);
  options.data.mix = {rollout::TaskMix{zorplex::TaskKind::kMultiStep, zorplex::Difficulty::kEasy},
                      rollout::TaskMix{zorplex::TaskKind::kCompositional, zorplex::Difficulty::kHard}};
  auto parsed = SftOptions::from_json(options.to_json());
  REQUIRE(parsed.ok());
  CHECK(parsed.value().to_json() == options.to_json());
  CHECK(parsed.value().model == options.model);
  CHECK_FALSE(SftOptions::from_json("{}").ok());
  CHECK_FALSE(SftOptions::from_json("not json").ok());
  options.batch_size = 0;
  CHECK(options.validate().find("batch size") != std::string::npos);
  CHECK_FALSE(SftTrainer::create(options).ok());

  SftOptions schedule = tiny_sft(110);
  schedule.warmup_steps = 10;
  schedule.lr = 1.0;
  schedule.min_lr_ratio = 0.1;
  CHECK(learning_rate(schedule, 0) == Approx(0.1));
  CHECK(learning_rate(schedule, 9) == Approx(1.0));
  CHECK(learning_rate(schedule, 60) == Approx(0.55));
  CHECK(learning_rate(schedule, 110) == Approx(0.1));
}

namespace {

torch::Tensor rows(std::vector<std::vector<double>> values) {
  std::vector<torch::Tensor> out;
  for (const auto& row : values) out.push_back(torch::tensor(row, torch::kFloat64));
  return torch::stack(out);
}

}  // namespace

TEST_CASE("policy loss: REINFORCE is -A log p averaged over the masked tokens", "[rl][training][loss]") {
  torch::Tensor log_probs = rows({{-1.0, -2.0}, {-0.5, -3.0}}).requires_grad_(true);
  PolicyLossInputs in;
  in.log_probs = log_probs;
  in.behaviour_log_probs = torch::zeros_like(log_probs);
  in.loss_mask = rows({{1, 1}, {1, 0}});
  in.advantages = torch::tensor({2.0, -1.0}, torch::kFloat64);
  PolicyLossOptions options;
  options.objective = Objective::kReinforce;
  const PolicyLoss loss = policy_loss(in, options);
  // (-2 * -1) + (-2 * -2) + (1 * -0.5) = 2 + 4 - 0.5 = 5.5 over 3 tokens.
  CHECK(loss.loss.item<double>() == Approx(5.5 / 3));
  CHECK(loss.tokens == 3);
  loss.loss.backward();
  CHECK(torch::allclose(log_probs.grad(), rows({{-2.0 / 3, -2.0 / 3}, {1.0 / 3, 0.0}})));
}

TEST_CASE("policy loss: the PPO/GRPO clip is active on each side", "[rl][training][loss]") {
  // Behaviour log-probs 0, so each ratio is exp(log_prob).
  torch::Tensor log_probs =
      rows({{std::log(1.5), std::log(0.5)}, {std::log(0.5), std::log(1.5)}}).requires_grad_(true);
  PolicyLossInputs in;
  in.log_probs = log_probs;
  in.behaviour_log_probs = torch::zeros({2, 2}, torch::kFloat64);
  in.loss_mask = torch::ones({2, 2}, torch::kFloat64);
  in.advantages = torch::tensor({1.0, -1.0}, torch::kFloat64);
  const PolicyLoss loss = policy_loss(in, PolicyLossOptions{});  // eps 0.2
  // A = +1: r 1.5 -> min(1.5, 1.2) = 1.2 (clipped above); r 0.5 -> min(0.5, 0.8) = 0.5.
  // A = -1: r 0.5 -> min(-0.5, -0.8) = -0.8 (clipped below); r 1.5 -> min(-1.5, -1.2) = -1.5.
  // loss = mean(-1.2, -0.5, 0.8, 1.5) = 0.15
  CHECK(loss.loss.item<double>() == Approx(0.15));
  CHECK(loss.clipped_fraction == Approx(0.5));
  CHECK(loss.mean_ratio == Approx(1.0));
  loss.loss.backward();
  // Clipped tokens have no gradient; the others d(-r A)/d log p = -r A, over 4 tokens.
  CHECK(torch::allclose(log_probs.grad(), rows({{0.0, -0.5 / 4}, {0.0, 1.5 / 4}})));
}

TEST_CASE("policy loss: the decoupled objective weights by pi_prox / pi_behav and caps it",
          "[rl][training][loss]") {
  PolicyLossInputs in;
  in.behaviour_log_probs = torch::zeros({2, 2}, torch::kFloat64);
  in.proximal_log_probs = rows({{std::log(2.0), std::log(4.0)}, {std::log(0.5), 0.0}});
  // Ratios against the proximal policy: 1.5 and 1.0 in row 0, 0.5 in row 1.
  torch::Tensor log_probs =
      rows({{std::log(2.0 * 1.5), std::log(4.0)}, {std::log(0.5 * 0.5), 0.0}}).requires_grad_(true);
  in.log_probs = log_probs;
  in.loss_mask = rows({{1, 1}, {1, 0}});
  in.advantages = torch::tensor({1.0, -1.0}, torch::kFloat64);
  PolicyLossOptions options;
  options.decoupled = true;
  options.behaviour_weight_cap = 3.0;
  const PolicyLoss loss = policy_loss(in, options);
  // Token (0,1) has weight 4 > 3: left out. (0,0): weight 2, r 1.5 clipped to 1.2 -> -2.4.
  // (1,0): weight 0.5, r 0.5 clipped to 0.8 with A = -1 -> +0.8 * 0.5 = 0.4. Mean over 2: -1.0.
  CHECK(loss.loss.item<double>() == Approx(-1.0));
  CHECK(loss.tokens == 2);
  CHECK(loss.capped_tokens == 1);
  CHECK(loss.clipped_fraction == Approx(1.0));
  CHECK(loss.mean_behaviour_weight == Approx(1.25));
  // Without the cap the weight-4 token counts: r = 1, A = 1 -> -1 * 4 = -4; mean (-2.4 - 4 + 0.4) / 3.
  options.behaviour_weight_cap = 0.0;
  CHECK(policy_loss(in, options).loss.item<double>() == Approx(-6.0 / 3));
  // Not decoupled: ratios against the behaviour policy (3.0, 4.0, 0.25), no weight.
  options.decoupled = false;
  // A = +1: min(3, 1.2) = 1.2, min(4, 1.2) = 1.2; A = -1: min(-0.25, -0.8) = -0.8 -> mean(-1.2, -1.2, 0.8).
  CHECK(policy_loss(in, options).loss.item<double>() == Approx(-1.6 / 3));
}

TEST_CASE("policy loss: the KL term adds kl_coef * k3 against the reference, pulling towards it",
          "[rl][training][loss]") {
  // Zero advantages: only the KL term is left.
  const double a = std::log(0.5), b = std::log(0.25);
  torch::Tensor log_probs = rows({{a, b}, {a, 0.0}}).requires_grad_(true);
  PolicyLossInputs in;
  in.log_probs = log_probs;
  in.behaviour_log_probs = log_probs.detach().clone();
  in.reference_log_probs = rows({{a, std::log(0.5)}, {std::log(0.125), 0.0}});
  in.loss_mask = rows({{1, 1}, {1, 0}});
  in.advantages = torch::zeros({2}, torch::kFloat64);
  PolicyLossOptions options;
  options.kl_coef = 0.5;
  const PolicyLoss loss = policy_loss(in, options);
  // k3(d) = e^d - d - 1 with d = ref - logp: token (0,0) d = 0 -> 0; (0,1) d = ln 2 -> 1 - ln 2;
  // (1,0) d = -ln 4 -> 1/4 + ln 4 - 1; (1,1) masked out. Mean over the 3 kept tokens.
  const double k01 = 1.0 - std::log(2.0), k10 = 0.25 + std::log(4.0) - 1.0;
  CHECK(loss.kl == Approx((k01 + k10) / 3));
  CHECK(loss.loss.item<double>() == Approx(0.5 * (k01 + k10) / 3));
  loss.loss.backward();
  // d k3 / d logp = 1 - e^d: negative where the reference is more likely (the log-prob is pushed up),
  // positive where it is less likely (pushed down), 0 where they agree and where masked.
  CHECK(torch::allclose(log_probs.grad(), rows({{0.0, 0.5 * (1.0 - 2.0) / 3}, {0.5 * (1.0 - 0.25) / 3, 0.0}})));
  // No term without a coefficient; a coefficient without a reference is a programming error.
  options.kl_coef = 0.0;
  CHECK(policy_loss(in, options).loss.item<double>() == 0.0);
  CHECK(policy_loss(in, options).kl == 0.0);
  options.kl_coef = 0.5;
  in.reference_log_probs = torch::Tensor();
  CHECK_THROWS(policy_loss(in, options));
}

namespace {

// `count` episodes of one easy compositional task (the first of `task_seed`)
// sampled by `model` at `temperature`, 20 new tokens a turn, as one group
// that carries that temperature; rewards all 0.
algorithms::TrajectoryGroup sampled_group(const policy::Transformer& model, std::int64_t task_seed, int count,
                                          double temperature = 1.0) {
  zorplex::TaskGenerator generator(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, task_seed);
  const zorplex::Task task = generator.next();
  std::vector<rollout::RolloutRequest> requests(static_cast<std::size_t>(count),
                                                rollout::RolloutRequest{task, &generator.tools()});
  rollout::RolloutOptions sampling;
  sampling.format = short_prompt();
  sampling.sampling.max_new_tokens = 20;
  sampling.sampling.temperature = temperature;
  auto sampled = rollout::run_rollouts(model, requests, sampling);
  REQUIRE(sampled.ok());
  algorithms::TrajectoryGroup group;
  group.trajectories = sampled.value();
  group.temperature = temperature;
  for (auto& t : group.trajectories) t.score.reward = 0.0;
  return group;
}

}  // namespace

TEST_CASE("RL update: one GRPO step raises the rewarded trajectory's log-prob and lowers the others'",
          "[rl][training][loss]") {
  auto model = policy::Transformer::create(tiny_config(), 4);
  REQUIRE(model.ok());
  // A group of three sampled episodes of one task; only the first is rewarded.
  algorithms::TrajectoryGroup group = sampled_group(model.value(), 42, 3);
  group.trajectories[0].score.reward = 1.0;
  group.trajectories[1].score.reward = 0.0;
  group.trajectories[2].score.reward = 0.0;
  auto sequence_log_prob = [&](const Trajectory& t) {
    torch::NoGradGuard no_grad;
    auto batch = make_token_batch({&t}, 256);
    REQUIRE(batch.ok());
    return (batch_log_probs(model.value(), batch.value()) * batch.value().loss_mask).sum().item<double>();
  };
  std::vector<double> before;
  for (const Trajectory& t : group.trajectories) before.push_back(sequence_log_prob(t));

  RlUpdateOptions options;
  options.lr = 1e-3;
  RlUpdater updater(model.value(), options);
  auto report = updater.update({group});
  REQUIRE(report.ok());
  CHECK(report.value().applied);
  CHECK(report.value().trajectories == 3);
  CHECK(report.value().reward_mean == Approx(1.0 / 3));
  CHECK(report.value().tokens == static_cast<std::int64_t>(group.trajectories[0].generated_tokens() +
                                                           group.trajectories[1].generated_tokens() +
                                                           group.trajectories[2].generated_tokens()));
  CHECK(report.value().mean_ratio == Approx(1.0).epsilon(1e-4));  // on-policy: behaviour = current
  CHECK(report.value().clipped_fraction == 0.0);
  CHECK(sequence_log_prob(group.trajectories[0]) > before[0]);
  CHECK(sequence_log_prob(group.trajectories[1]) < before[1]);
  CHECK(sequence_log_prob(group.trajectories[2]) < before[2]);

  // The running-mean baseline: the first batch's advantages are r - 0, then b = mean.
  RlUpdateOptions reinforce;
  reinforce.loss.objective = Objective::kReinforce;
  reinforce.baseline = BaselineKind::kRunningMean;
  RlUpdater reinforce_updater(model.value(), reinforce);
  REQUIRE(reinforce_updater.update({group}).ok());
  CHECK(reinforce_updater.baseline().value() == Approx(1.0 / 3));
  CHECK_FALSE(updater.update({}).ok());
}

TEST_CASE("RL update: the leave-one-out baseline reaches the update, and a group of one is refused",
          "[rl][training][loss]") {
  auto model = policy::Transformer::create(tiny_config(), 6);
  REQUIRE(model.ok());
  algorithms::TrajectoryGroup group = sampled_group(model.value(), 44, 3);
  group.trajectories[0].score.reward = 1.0;
  group.trajectories[1].score.reward = 0.0;
  group.trajectories[2].score.reward = 0.0;
  RlUpdateOptions options;
  options.lr = 0.0;  // the advantages only
  options.baseline = BaselineKind::kLeaveOneOut;
  options.normalize_advantages = true;  // ignored: RLOO is never normalised
  RlUpdater updater(model.value(), options);
  auto report = updater.update({group});
  REQUIRE(report.ok());
  // 1 - 0, 0 - 1/2, 0 - 1/2: mean |A| 2/3 (the group mean's would be 4/9,
  // GRPO's normalised one 2 sqrt(2) / 3).
  CHECK(report.value().advantage_abs_mean == Approx(2.0 / 3));
  algorithms::TrajectoryGroup one = group;
  one.trajectories.resize(1);
  one.generator = 7;
  auto refused = updater.update({group, one});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("generator 7") != std::string::npos);
  CHECK(refused.error().message.find("--min-group-size") != std::string::npos);
}

TEST_CASE("RL update: log-probs are recomputed at the temperature the group carries, and two in a batch are refused",
          "[rl][training][loss]") {
  auto model = policy::Transformer::create(tiny_config(), 5);
  REQUIRE(model.ok());
  // The behaviour log-probs are recorded at 0.25.
  algorithms::TrajectoryGroup group = sampled_group(model.value(), 43, 3, 0.25);
  group.trajectories[0].score.reward = 1.0;
  RlUpdateOptions options;
  options.lr = 0.0;  // measure the ratio only
  SECTION("at the carried temperature the first step is on-policy: ratio 1") {
    group.temperature = 0.25;
    RlUpdater updater(model.value(), options);
    auto report = updater.update({group});
    REQUIRE(report.ok());
    CHECK(report.value().temperature == 0.25);
    CHECK(report.value().mean_ratio == Approx(1.0).epsilon(1e-4));
  }
  SECTION("claiming another temperature gives ratios far from 1 (what the old fixed --temperature did)") {
    group.temperature = 1.0;
    RlUpdater updater(model.value(), options);
    auto report = updater.update({group});
    REQUIRE(report.ok());
    CHECK(std::abs(report.value().mean_ratio - 1.0) > 0.05);
  }
  SECTION("two temperatures in one batch") {
    algorithms::TrajectoryGroup other = group;
    group.temperature = 0.25;
    other.temperature = 0.7;
    RlUpdater updater(model.value(), options);
    auto report = updater.update({group, other});
    REQUIRE_FALSE(report.ok());
    CHECK(report.error().message.find("different temperatures") != std::string::npos);
  }
}

TEST_CASE("RL update: with PPO minibatches the policies part and the clip acts, with one it never does",
          "[rl][training][loss]") {
  auto model = policy::Transformer::create(tiny_config(), 6);
  REQUIRE(model.ok());
  algorithms::TrajectoryGroup group = sampled_group(model.value(), 44, 8);
  for (std::size_t i = 0; i < group.trajectories.size(); ++i) group.trajectories[i].score.reward = i % 2 == 0;
  const bool decoupled = GENERATE(false, true);
  INFO("decoupled " << decoupled);
  RlUpdateOptions options;
  options.lr = 3e-2;  // large steps: the ratio moves far within one batch
  options.loss.decoupled = decoupled;
  options.loss.behaviour_weight_cap = decoupled ? 5.0 : 0.0;
  SECTION("one minibatch: on-policy, ratio 1, nothing clipped") {
    RlUpdater updater(model.value(), options);
    auto report = updater.update({group});
    REQUIRE(report.ok());
    CHECK(report.value().minibatches == 1);
    CHECK(report.value().mean_ratio == Approx(1.0).epsilon(1e-4));
    CHECK(report.value().clipped_fraction == 0.0);
  }
  SECTION("four minibatches: four steps, and the later ones see a moved policy") {
    options.minibatches = 4;
    RlUpdater updater(model.value(), options);
    auto report = updater.update({group});
    REQUIRE(report.ok());
    CHECK(report.value().minibatches == 4);
    CHECK(report.value().clipped_fraction > 0.0);
    CHECK(std::abs(report.value().mean_ratio - 1.0) > 1e-3);
    CHECK(report.value().trajectories == 8);
  }
}

TEST_CASE("RL update: the KL term pulls a moved policy back to the reference, and without it nothing moves",
          "[rl][training][loss]") {
  auto reference = policy::Transformer::create(tiny_config(), 7);
  REQUIRE(reference.ok());
  // The policy: the reference's weights plus seeded noise, in a buffer of its own.
  torch::manual_seed(705);
  auto model = policy::Transformer::wrap(
      tiny_config(), reference.value().flat_parameters() + 0.05 * torch::randn_like(reference.value().flat_parameters()));
  REQUIRE(model.ok());
  // Equal rewards: every advantage is 0, so the policy-gradient term is 0.
  algorithms::TrajectoryGroup group = sampled_group(model.value(), 45, 4);
  RlUpdateOptions options;
  options.lr = 3e-3;
  options.adamw.weight_decay = 0.0;
  options.loss.kl_coef = 1.0;
  SECTION("with a reference: the KL estimate falls step after step") {
    RlUpdater updater(model.value(), options);
    updater.set_reference(&reference.value());
    // 4 steps: the estimate falls at each (by over a third, seeded); later
    // steps flatten out near Adam's step size, where a strict fall is noise.
    std::vector<double> kl;
    for (int step = 0; step < 4; ++step) {
      auto report = updater.update({group});
      REQUIRE(report.ok());
      kl.push_back(report.value().kl);
    }
    std::ostringstream trace;
    for (double k : kl) trace << k << " ";
    INFO("kl by step: " << trace.str());
    CHECK(kl.front() > 1e-3);
    for (std::size_t i = 1; i < kl.size(); ++i) CHECK(kl[i] < kl[i - 1]);
    CHECK(kl.back() < 0.5 * kl.front());
  }
  SECTION("without the term the zero-advantage update leaves the weights as they are") {
    options.loss.kl_coef = 0.0;
    const torch::Tensor before = model.value().flat_parameters().clone();
    RlUpdater updater(model.value(), options);
    auto report = updater.update({group});
    REQUIRE(report.ok());
    CHECK(report.value().kl == 0.0);
    CHECK(torch::equal(model.value().flat_parameters(), before));
  }
  SECTION("a KL term with no reference set is refused, the weights untouched") {
    const torch::Tensor before = model.value().flat_parameters().clone();
    RlUpdater updater(model.value(), options);
    auto report = updater.update({group});
    REQUIRE_FALSE(report.ok());
    CHECK(report.error().message.find("reference policy") != std::string::npos);
    CHECK(torch::equal(model.value().flat_parameters(), before));
  }
}

namespace {

// A trajectory of `text` after a 3-token prompt, every text token generated
// (behaviour log-prob 0, version 1), with `reward`.
Trajectory written(const std::string& text, double reward) {
  Trajectory t;
  t.tokens = {policy::kUser, 'q', policy::kAssistant};
  t.generated.assign(3, 0);
  for (char c : text) {
    t.tokens.push_back(static_cast<unsigned char>(c));
    t.generated.push_back(1);
  }
  t.prompt_tokens = 3;
  t.log_probs.assign(t.tokens.size(), 0.0f);
  t.token_versions.assign(t.tokens.size(), 1);
  t.score.reward = reward;
  return t;
}

}  // namespace

TEST_CASE("RL update: step credit leaves a wrong answer's right steps out of its negative advantage",
          "[rl][training][loss][credit]") {
  // "8*7+4=69": the first wrong token is the '9', 6 characters in plus the
  // prompt: the wrong trajectory's 9 tokens before it get none of its
  // negative advantage; the right one keeps all of its positive advantage.
  const std::string wrong_text = "8*7+4=69, [ANSWER] 69";
  const std::string right_text = "8*7+4=60, [ANSWER] 60";
  algorithms::TrajectoryGroup group;
  group.trajectories = {written(right_text, 1.0), written(wrong_text, 0.0)};
  RlUpdateOptions options;
  options.lr = 1e-3;
  options.loss.objective = Objective::kReinforce;
  options.step_credit = true;
  const std::int64_t wrong_prefix = 3 + static_cast<std::int64_t>(wrong_text.find("69") + 1);
  auto model = policy::Transformer::create(tiny_config(), 4);
  REQUIRE(model.ok());
  auto outcome_model = policy::Transformer::create(tiny_config(), 4);
  REQUIRE(outcome_model.ok());
  RlUpdater updater(model.value(), options);
  auto report = updater.update({group});
  REQUIRE(report.ok());
  // Targets are tokens 1.. of each row: the prompt's are not generated.
  CHECK(report.value().uncredited_tokens == wrong_prefix - 3);
  CHECK(report.value().tokens ==
        static_cast<std::int64_t>(right_text.size() + wrong_text.size()) - (wrong_prefix - 3));

  // Outcome credit moves the weights otherwise (it pushes the right prefix down too).
  RlUpdateOptions outcome = options;
  outcome.step_credit = false;
  RlUpdater outcome_updater(outcome_model.value(), outcome);
  auto outcome_report = outcome_updater.update({group});
  REQUIRE(outcome_report.ok());
  CHECK(outcome_report.value().uncredited_tokens == 0);
  CHECK_FALSE(torch::allclose(model.value().flat_parameters(), outcome_model.value().flat_parameters()));

  // With no wrong step anywhere, step credit is outcome credit, bit for bit.
  algorithms::TrajectoryGroup plain;
  plain.trajectories = {written("LOOKUP[cat] [ANSWER] 7", 1.0), written("LOOKUP[dog] [ANSWER] 9", 0.0)};
  auto a = policy::Transformer::create(tiny_config(), 5);
  auto b = policy::Transformer::create(tiny_config(), 5);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  RlUpdater with_credit(a.value(), options);
  RlUpdater without(b.value(), outcome);
  REQUIRE(with_credit.update({plain}).ok());
  REQUIRE(without.update({plain}).ok());
  CHECK(torch::equal(a.value().flat_parameters(), b.value().flat_parameters()));
}

TEST_CASE("RL update: step credit on packed rows leaves out the same tokens and makes the same update",
          "[rl][training][loss][credit]") {
  // Three trajectories of different lengths, packed two to a row: the
  // credit ranges must follow each trajectory to its place in its row.
  algorithms::TrajectoryGroup group;
  group.trajectories = {written("8*7+4=60, [ANSWER] 60", 1.0), written("8*7+4=69, [ANSWER] 69", 0.0),
                        written("7*6+0=41, 4*6+4=28, [ANSWER] 281", 0.0)};
  RlUpdateOptions padded;
  padded.lr = 1e-3;
  padded.loss.objective = Objective::kReinforce;
  padded.step_credit = true;
  RlUpdateOptions packed = padded;
  packed.pack_sequences = true;
  packed.pack_row_tokens = 64;  // room for two of them a row
  auto a = policy::Transformer::create(tiny_config(), 6);
  auto b = policy::Transformer::create(tiny_config(), 6);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  RlUpdater padded_updater(a.value(), padded);
  RlUpdater packed_updater(b.value(), packed);
  auto padded_report = padded_updater.update({group});
  auto packed_report = packed_updater.update({group});
  REQUIRE(padded_report.ok());
  REQUIRE(packed_report.ok());
  // The wrong ones: 6 + 1 tokens before the '9', 6 + 1 before the '1' of 41.
  CHECK(padded_report.value().uncredited_tokens == 14);
  CHECK(packed_report.value().uncredited_tokens == 14);
  CHECK(packed_report.value().tokens == padded_report.value().tokens);
  CHECK(torch::allclose(a.value().flat_parameters(), b.value().flat_parameters(), 1e-5, 1e-6));
}
