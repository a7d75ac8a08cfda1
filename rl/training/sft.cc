// training/sft.cc: see sft.h.
#include "training/sft.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>
#include <nlohmann/json.hpp>

#include "policy/safetensors.h"
#include "training/token_batch.h"

namespace training {
namespace {

using nlohmann::json;

constexpr const char* kOptimizerFormat = "weightsync-sft-optimizer/1";

json data_to_json(const rollout::DemonstrationOptions& data) {
  json mix = json::array();
  for (const rollout::TaskMix& m : data.mix) mix.push_back(rollout::task_mix_name(m));
  return json{{"mix", mix},
              {"first_task_seed", data.first_task_seed},
              {"tasks_per_seed", data.tasks_per_seed},
              {"imperfect_fraction", data.imperfect_fraction},
              {"seed", data.seed},
              {"arithmetic", rollout::arithmetic_name(data.arithmetic)},
              {"system_prompt", data.format.system_prompt},
              {"include_system", data.format.include_system}};
}

zorplex::Result<rollout::DemonstrationOptions> data_from_json(const json& j) {
  rollout::DemonstrationOptions data;
  data.mix.clear();
  for (const auto& name : j.at("mix")) {
    auto mix = rollout::parse_task_mix(name.get<std::string>());
    if (!mix) return mix.error();
    data.mix.push_back(mix.value());
  }
  data.first_task_seed = j.at("first_task_seed").get<std::int64_t>();
  data.tasks_per_seed = j.at("tasks_per_seed").get<int>();
  data.imperfect_fraction = j.at("imperfect_fraction").get<double>();
  data.seed = j.at("seed").get<std::uint64_t>();
  auto arithmetic = rollout::parse_arithmetic(j.at("arithmetic").get<std::string>());
  if (!arithmetic) return arithmetic.error();
  data.arithmetic = arithmetic.value();
  data.format.system_prompt = j.at("system_prompt").get<std::string>();
  data.format.include_system = j.at("include_system").get<bool>();
  return data;
}

bool make_dir(const std::string& dir) {
  return ::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST;
}

}  // namespace

std::string SftOptions::validate() const {
  if (auto problem = model.validate()) return "model: " + *problem;
  if (std::string problem = data.validate(); !problem.empty()) return "data: " + problem;
  if (steps < 0) return "steps must be >= 0";
  if (batch_size < 1) return "batch size must be >= 1";
  if (length_groups < 1) return "length groups must be >= 1";
  if (!(lr > 0.0) || !std::isfinite(lr)) return "learning rate must be a finite number > 0";
  if (warmup_steps < 0) return "warm-up steps must be >= 0";
  if (!(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0)) return "min_lr_ratio must be in [0, 1]";
  if (!(adamw.beta1 >= 0.0 && adamw.beta1 < 1.0 && adamw.beta2 >= 0.0 && adamw.beta2 < 1.0)) {
    return "AdamW betas must be in [0, 1)";
  }
  if (!(adamw.eps > 0.0) || adamw.weight_decay < 0.0) return "AdamW eps must be > 0 and weight decay >= 0";
  return "";
}

std::string SftOptions::to_json() const {
  json model_json = json::object();
  for (const auto& [key, value] : model.to_map()) model_json[key] = value;
  const json j{{"model", model_json},
               {"init_seed", init_seed},
               {"data", data_to_json(data)},
               {"steps", steps},
               {"batch_size", batch_size},
               {"length_groups", length_groups},
               {"lr", lr},
               {"warmup_steps", warmup_steps},
               {"min_lr_ratio", min_lr_ratio},
               {"adamw",
                {{"beta1", adamw.beta1},
                 {"beta2", adamw.beta2},
                 {"eps", adamw.eps},
                 {"weight_decay", adamw.weight_decay},
                 {"max_grad_norm", adamw.max_grad_norm}}}};
  return j.dump();
}

zorplex::Result<SftOptions> SftOptions::from_json(const std::string& text) try {
  const json j = json::parse(text);
  SftOptions options;
  std::map<std::string, std::string> model_map;
  for (const auto& [key, value] : j.at("model").items()) model_map[key] = value.get<std::string>();
  auto model = policy::ModelConfig::from_map(model_map);
  if (!model) return model.error();
  options.model = model.value();
  options.init_seed = j.at("init_seed").get<std::uint64_t>();
  auto data = data_from_json(j.at("data"));
  if (!data) return data.error();
  options.data = data.value();
  options.steps = j.at("steps").get<int>();
  options.batch_size = j.at("batch_size").get<int>();
  options.length_groups = j.value("length_groups", 1);  // checkpoints before it padded the batch as one
  options.lr = j.at("lr").get<double>();
  options.warmup_steps = j.at("warmup_steps").get<int>();
  options.min_lr_ratio = j.at("min_lr_ratio").get<double>();
  const json& a = j.at("adamw");
  options.adamw.beta1 = a.at("beta1").get<double>();
  options.adamw.beta2 = a.at("beta2").get<double>();
  options.adamw.eps = a.at("eps").get<double>();
  options.adamw.weight_decay = a.at("weight_decay").get<double>();
  options.adamw.max_grad_norm = a.at("max_grad_norm").get<double>();
  if (std::string problem = options.validate(); !problem.empty()) return zorplex::Error{problem};
  return options;
} catch (const json::exception& e) {
  return zorplex::Error{std::string("SFT options are not valid JSON of the expected shape: ") + e.what()};
}

SftOptions recommended_warm_start() {
  SftOptions options;
  options.model.positions = policy::PositionEncoding::kRotary;
  options.data.format.system_prompt = "";
  options.data.arithmetic = rollout::Arithmetic::kColumns;
  options.data.mix = {rollout::TaskMix{zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium}};
  options.steps = 1500;
  return options;
}

double learning_rate(const SftOptions& options, int step) {
  if (step < options.warmup_steps) return options.lr * (step + 1) / options.warmup_steps;
  const int decay_steps = options.steps - options.warmup_steps;
  if (decay_steps <= 0) return options.lr;
  const double progress = std::min(1.0, static_cast<double>(step - options.warmup_steps) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return options.lr * (options.min_lr_ratio + (1.0 - options.min_lr_ratio) * cosine);
}

std::string policy_file(const std::string& dir) {
  return dir + "/policy.safetensors";
}
std::string optimizer_file(const std::string& dir) {
  return dir + "/optimizer.safetensors";
}

SftTrainer::SftTrainer(SftOptions options, policy::Transformer model)
    : options_(std::move(options)),
      model_(std::move(model)),
      optimizer_(model_, options_.adamw),
      data_(options_.data) {}

zorplex::Result<std::unique_ptr<SftTrainer>> SftTrainer::create(const SftOptions& options) {
  if (std::string problem = options.validate(); !problem.empty()) return zorplex::Error{problem};
  auto model = policy::Transformer::create(options.model, options.init_seed);
  if (!model) return model.error();
  return std::unique_ptr<SftTrainer>(new SftTrainer(options, std::move(model).value()));
}

zorplex::Result<std::unique_ptr<SftTrainer>> SftTrainer::resume(const std::string& dir) {
  auto model = policy::load_model(policy_file(dir));
  if (!model) return zorplex::Error{policy_file(dir) + ": " + model.error().message};
  auto file = policy::read_safetensors(policy_file(dir));
  if (!file) return file.error();
  const policy::Metadata& meta = file.value().metadata;
  if (meta.count("sft.options") == 0 || meta.count("sft.step") == 0) {
    return zorplex::Error{policy_file(dir) +
                          " is a policy but not an SFT checkpoint (no sft.options / sft.step)"};
  }
  auto options = SftOptions::from_json(meta.at("sft.options"));
  if (!options) return zorplex::Error{policy_file(dir) + ": " + options.error().message};
  auto state_file = policy::read_safetensors(optimizer_file(dir));
  if (!state_file) return zorplex::Error{optimizer_file(dir) + ": " + state_file.error().message};
  const policy::Metadata& state_meta = state_file.value().metadata;
  if (state_meta.count("format") == 0 || state_meta.at("format") != kOptimizerFormat) {
    return zorplex::Error{optimizer_file(dir) + " is not an SFT optimizer state (" + kOptimizerFormat + ")"};
  }
  if (state_meta.count("sft.step") == 0 || state_meta.at("sft.step") != meta.at("sft.step")) {
    return zorplex::Error{dir +
                          ": the policy and optimizer files are from different steps (a save was cut "
                          "short?); resume from an older copy or start again"};
  }
  AdamWState state;
  for (const policy::NamedTensor& t : state_file.value().tensors) {
    if (t.name == "exp_avg") state.exp_avg = t.tensor;
    if (t.name == "exp_avg_sq") state.exp_avg_sq = t.tensor;
  }
  int completed = 0;
  try {
    state.step = std::stoll(state_meta.at("step"));
    completed = std::stoi(meta.at("sft.step"));
  } catch (const std::exception&) {
    return zorplex::Error{dir + ": step counts in the metadata are not integers"};
  }
  if (options.value().model != model.value().config()) {
    return zorplex::Error{dir + ": the model config in sft.options differs from the policy's"};
  }
  std::unique_ptr<SftTrainer> trainer(new SftTrainer(options.value(), std::move(model).value()));
  auto loaded = trainer->optimizer_.load_state(state);
  if (!loaded) return zorplex::Error{optimizer_file(dir) + ": " + loaded.error().message};
  trainer->completed_ = completed;
  return trainer;
}

zorplex::Result<SftStepReport> SftTrainer::step() try {
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t first =
      static_cast<std::uint64_t>(completed_) * static_cast<std::uint64_t>(options_.batch_size);
  std::vector<rollout::Trajectory> examples;
  examples.reserve(static_cast<std::size_t>(options_.batch_size));
  for (int i = 0; i < options_.batch_size; ++i)
    examples.push_back(data_.at(first + static_cast<std::uint64_t>(i)));
  std::vector<const rollout::Trajectory*> pointers;
  SftStepReport report;
  for (const rollout::Trajectory& t : examples) {
    pointers.push_back(&t);
    report.tokens += static_cast<std::int64_t>(t.tokens.size());
  }
  // Micro-batches of similar lengths: the stable sort keeps the stream's
  // order among equal lengths, so a step is a function of its index.
  std::stable_sort(pointers.begin(), pointers.end(), [](const auto* a, const auto* b) {
    return a->tokens.size() < b->tokens.size();
  });
  std::vector<TokenBatch> groups;
  const std::size_t count = pointers.size();
  const auto group_count = static_cast<std::size_t>(std::min(options_.length_groups, options_.batch_size));
  for (std::size_t g = 0; g < group_count; ++g) {
    const std::vector<const rollout::Trajectory*> members(
        pointers.begin() + static_cast<std::ptrdiff_t>(g * count / group_count),
        pointers.begin() + static_cast<std::ptrdiff_t>((g + 1) * count / group_count));
    auto batch = make_token_batch(members, options_.model.max_seq_len, model_.device());
    if (!batch) return batch.error();
    report.target_tokens += batch.value().target_tokens;
    groups.push_back(std::move(batch).value());
  }
  model_.zero_grad();
  // Each group's loss and gradients apart, on workers_ threads (group g on
  // worker g mod workers_), then added in group order: the same update for
  // any worker count.
  const std::vector<torch::Tensor>& params = model_.parameters();
  std::vector<std::vector<torch::Tensor>> grads(groups.size());
  std::vector<double> losses(groups.size(), 0.0);
  auto run_groups = [&](std::size_t start_group, std::size_t stride) {
    for (std::size_t g = start_group; g < groups.size(); g += stride) {
      torch::Tensor loss = masked_mean_nll(model_, groups[g], report.target_tokens);
      grads[g] = torch::autograd::grad({loss}, params, /*grad_outputs=*/{}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
      losses[g] = loss.item<double>();
    }
  };
  const std::size_t workers = std::min(static_cast<std::size_t>(workers_), groups.size());
  if (workers <= 1) {
    run_groups(0, 1);
  } else {
    std::vector<std::exception_ptr> failures(workers);
    std::vector<std::thread> threads;
    for (std::size_t w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        try {
          at::set_num_threads(1);
          run_groups(w, workers);
        } catch (...) {
          failures[w] = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& failure : failures) {
      if (failure) std::rethrow_exception(failure);
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    torch::Tensor sum;
    for (const std::vector<torch::Tensor>& group_grads : grads) {
      if (!group_grads[i].defined()) continue;
      sum = sum.defined() ? sum + group_grads[i] : group_grads[i];
    }
    torch::Tensor param = params[i];  // shares the parameter's grad slot
    if (sum.defined()) param.mutable_grad() = sum;
  }
  for (double loss : losses) report.loss += loss;
  report.lr = learning_rate(options_, completed_);
  const StepResult result = optimizer_.step(report.lr);
  model_.zero_grad();
  report.grad_norm = result.grad_norm;
  report.applied = result.applied;
  ++completed_;
  report.step = completed_;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
} catch (const std::exception& e) {
  return zorplex::Error{std::string("SFT step failed: ") + e.what()};
}

zorplex::Result<std::uint64_t> SftTrainer::save(const std::string& dir) const {
  if (!make_dir(dir))
    return zorplex::Error{"cannot create checkpoint folder " + dir + ": " + std::strerror(errno)};
  const std::string step = std::to_string(completed_);
  const AdamWState& state = optimizer_.state();
  auto optimizer_bytes = policy::write_safetensors(
      optimizer_file(dir), {{"exp_avg", state.exp_avg}, {"exp_avg_sq", state.exp_avg_sq}},
      {{"format", kOptimizerFormat}, {"step", std::to_string(state.step)}, {"sft.step", step}});
  if (!optimizer_bytes) return optimizer_bytes.error();
  auto policy_bytes =
      policy::save_model(policy_file(dir), model_, {{"sft.step", step}, {"sft.options", options_.to_json()}});
  if (!policy_bytes) return policy_bytes.error();
  return optimizer_bytes.value() + policy_bytes.value();
}

}  // namespace training
