#include "loop/rl_checkpoint.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "training/sft.h"

namespace loop {
namespace {

constexpr const char* kOptimizerFormat = "weightsync-rl-optimizer/1";

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

zorplex::Result<long long> integer_field(const policy::Metadata& metadata, const std::string& key,
                                         const std::string& where) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return zorplex::Error{where + ": no \"" + key + "\" in the metadata"};
  try {
    std::size_t used = 0;
    const long long value = std::stoll(it->second, &used);
    if (used != it->second.size() || value < 0) throw std::invalid_argument("trailing text");
    return value;
  } catch (const std::exception&) {
    return zorplex::Error{where + ": \"" + key + "\" is not a non-negative integer: " + it->second};
  }
}

}  // namespace

std::string rl_policy_file(const std::string& dir) {
  return dir + "/policy.safetensors";
}

std::string rl_optimizer_file(const std::string& dir, int step) {
  return dir + "/optimizer-step" + std::to_string(step) + ".safetensors";
}

bool has_rl_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(rl_policy_file(dir), ec)) return false;
  auto file = policy::read_safetensors(rl_policy_file(dir));
  return file && file.value().metadata.count("rl.step") != 0;
}

zorplex::Result<policy::PromptFormat> prompt_format_of(const policy::Metadata& metadata) {
  auto it = metadata.find("sft.options");
  if (it == metadata.end()) return policy::PromptFormat{};
  auto options = training::SftOptions::from_json(it->second);
  if (!options) return zorplex::Error{"the checkpoint's sft.options: " + options.error().message};
  return options.value().data.format;
}

policy::Metadata carried_metadata(const policy::Metadata& metadata) {
  const auto config_keys = policy::ModelConfig{}.to_map();
  policy::Metadata carried;
  for (const auto& [key, value] : metadata) {
    if (key == "format" || config_keys.count(key) != 0 || starts_with(key, "rl.")) continue;
    carried[key] = value;
  }
  return carried;
}

zorplex::Result<std::uint64_t> save_rl_checkpoint(const std::string& dir, const policy::Transformer& model,
                                                  training::RlUpdater& updater, const RlProgress& progress,
                                                  const std::string& options_json,
                                                  const policy::Metadata& carried) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return zorplex::Error{"cannot create checkpoint folder " + dir + ": " + ec.message()};
  const std::string step = std::to_string(progress.step);
  const training::AdamWState& state = updater.optimizer().state();
  const algorithms::RunningMeanBaseline& baseline = updater.baseline();
  char baseline_text[64];
  std::snprintf(baseline_text, sizeof baseline_text, "%.17g", baseline.value());
  auto optimizer_bytes = policy::write_safetensors(
      rl_optimizer_file(dir, progress.step), {{"exp_avg", state.exp_avg}, {"exp_avg_sq", state.exp_avg_sq}},
      {{"format", kOptimizerFormat},
       {"step", std::to_string(state.step)},
       {"rl.step", step},
       {"baseline.value", baseline_text},
       {"baseline.initialized", baseline.initialized() ? "1" : "0"}});
  if (!optimizer_bytes) return optimizer_bytes.error();
  policy::Metadata metadata = carried_metadata(carried);
  metadata["rl.version"] = std::to_string(progress.version);
  metadata["rl.step"] = step;
  metadata["rl.options"] = options_json;
  auto policy_bytes = policy::save_model(rl_policy_file(dir), model, metadata);
  if (!policy_bytes) return policy_bytes.error();
  const std::string keep = std::filesystem::path(rl_optimizer_file(dir, progress.step)).filename().string();
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (starts_with(name, "optimizer-step") && name != keep) std::filesystem::remove(entry.path(), ec);
  }
  return optimizer_bytes.value() + policy_bytes.value();
}

zorplex::Result<RlProgress> read_rl_progress(const policy::Metadata& metadata) {
  auto version = integer_field(metadata, "rl.version", "RL checkpoint");
  if (!version) return version.error();
  auto step = integer_field(metadata, "rl.step", "RL checkpoint");
  if (!step) return step.error();
  return RlProgress{static_cast<std::uint64_t>(version.value()), static_cast<int>(step.value())};
}

zorplex::Result<bool> restore_rl_optimizer(const std::string& dir, training::RlUpdater& updater,
                                           const RlProgress& progress) {
  const std::string path = rl_optimizer_file(dir, progress.step);
  auto file = policy::read_safetensors(path);
  if (!file) return zorplex::Error{path + ": " + file.error().message};
  const policy::Metadata& meta = file.value().metadata;
  if (meta.count("format") == 0 || meta.at("format") != kOptimizerFormat) {
    return zorplex::Error{path + " is not an RL optimizer state (" + kOptimizerFormat + ")"};
  }
  auto step = integer_field(meta, "rl.step", path);
  if (!step) return step.error();
  if (step.value() != progress.step) {
    return zorplex::Error{dir + ": the policy (step " + std::to_string(progress.step) +
                          ") and optimizer (step " + std::to_string(step.value()) +
                          ") files differ (a save cut short?); restore an older copy or start again"};
  }
  auto adam_step = integer_field(meta, "step", path);
  if (!adam_step) return adam_step.error();
  training::AdamWState state;
  for (const policy::NamedTensor& t : file.value().tensors) {
    if (t.name == "exp_avg") state.exp_avg = t.tensor;
    if (t.name == "exp_avg_sq") state.exp_avg_sq = t.tensor;
  }
  state.step = adam_step.value();
  auto loaded = updater.optimizer().load_state(state);
  if (!loaded) return zorplex::Error{path + ": " + loaded.error().message};
  try {
    updater.baseline().restore(std::stod(meta.at("baseline.value")), meta.at("baseline.initialized") == "1");
  } catch (const std::exception&) {
    return zorplex::Error{path + ": the baseline in the metadata is missing or not a number"};
  }
  return true;
}

}  // namespace loop
