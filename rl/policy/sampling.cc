// policy/sampling.cc: see sampling.h.
#include "policy/sampling.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <exception>

namespace policy {
namespace {

double effective_temperature(double temperature) {
  return temperature > 0.0 ? temperature : 1.0;
}

// One token per row of last [A, V].
torch::Tensor sample_tokens(const torch::Tensor& last, const SamplingOptions& options, at::Generator& gen) {
  if (options.temperature <= 0.0) return last.argmax(-1);
  // Sampling runs on the CPU generator; logits come back to the CPU for it.
  torch::Tensor probs = torch::softmax(last.to(torch::kCPU).to(torch::kFloat32) / options.temperature, -1);
  if (options.top_p < 1.0) {
    auto sorted = probs.sort(-1, /*descending=*/true);
    torch::Tensor sorted_probs = std::get<0>(sorted);
    torch::Tensor order = std::get<1>(sorted);
    // Keep a token when the mass before it is below top_p (the first always).
    torch::Tensor before = sorted_probs.cumsum(-1) - sorted_probs;
    sorted_probs = sorted_probs.masked_fill(before >= options.top_p, 0.0);
    torch::Tensor pick = torch::multinomial(sorted_probs, 1, false, gen);
    return order.gather(-1, pick).squeeze(-1).to(last.device());
  }
  return torch::multinomial(probs, 1, false, gen).squeeze(-1).to(last.device());
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kEndOfSequence: return "eos";
    case StopReason::kStopped: return "stopped";
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kContextFull: return "context_full";
  }
  return "unknown";
}

torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& targets, double temperature) {
  torch::Tensor logp = torch::log_softmax(logits / effective_temperature(temperature), -1);
  return logp.gather(-1, targets.to(torch::kLong).unsqueeze(-1)).squeeze(-1);
}

torch::Tensor sequence_log_probs(const Transformer& model, const torch::Tensor& tokens, double temperature,
                                 const torch::Tensor& mask) {
  const std::int64_t time = tokens.size(1);
  torch::Tensor logits = model.forward(tokens, mask);
  torch::Tensor targets = tokens.narrow(1, 1, time - 1).to(logits.device());
  return token_log_probs(logits.narrow(1, 0, time - 1), targets, temperature);
}

zorplex::Result<std::vector<Generation>> generate(const Transformer& model,
                                                  const std::vector<std::vector<TokenId>>& prompts,
                                                  const SamplingOptions& options, const StopCallback& stop,
                                                  const StepHook& hook) try {
  const ModelConfig& config = model.config();
  // The model of the next step (the hook's, when given; the same config).
  ModelAtStep current{&model, 0};
  auto next_model = [&]() -> zorplex::Result<bool> {
    if (!hook) return true;
    ModelAtStep asked = hook();
    if (asked.model == nullptr) return zorplex::Error{"the step hook returned no model"};
    if (!(asked.model->config() == config)) {
      return zorplex::Error{"the step hook returned a model of another config"};
    }
    current = asked;
    return true;
  };
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature)) {
    return zorplex::Error{"temperature must be a finite number >= 0 (0 is greedy)"};
  }
  if (!(options.top_p > 0.0 && options.top_p <= 1.0)) return zorplex::Error{"top_p must be in (0, 1]"};
  if (options.max_new_tokens < 0) return zorplex::Error{"max_new_tokens must be >= 0"};
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& prompt = prompts[i];
    const auto size = static_cast<std::int64_t>(prompt.size());
    if (size < 1 || size >= config.max_seq_len) {
      return zorplex::Error{"prompt " + std::to_string(i) + " has " + std::to_string(size) +
                            " tokens; it needs 1.." + std::to_string(config.max_seq_len - 1) +
                            " (max_seq_len - 1, room for one new token)"};
    }
    for (TokenId id : prompt) {
      if (id < 0 || id >= config.vocab_size) {
        return zorplex::Error{"prompt " + std::to_string(i) + " holds token id " + std::to_string(id) +
                              ", outside the vocabulary (0.." + std::to_string(config.vocab_size - 1) + ")"};
      }
    }
    longest = std::max(longest, size);
  }
  std::vector<Generation> results(prompts.size());
  if (prompts.empty() || options.max_new_tokens == 0) return results;

  torch::NoGradGuard no_grad;
  const auto batch = static_cast<std::int64_t>(prompts.size());
  // Left-pad into one batch.
  torch::Tensor padded = torch::full({batch, longest}, kPad, torch::kLong);
  torch::Tensor mask = torch::zeros({batch, longest}, torch::kBool);
  auto padded_a = padded.accessor<std::int64_t, 2>();
  auto mask_a = mask.accessor<bool, 2>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& prompt = prompts[b];
    const std::int64_t pad = longest - static_cast<std::int64_t>(prompt.size());
    for (std::size_t j = 0; j < prompt.size(); ++j) {
      padded_a[b][pad + static_cast<std::int64_t>(j)] = prompt[j];
      mask_a[b][pad + static_cast<std::int64_t>(j)] = true;
    }
  }
  KVCache cache;
  if (auto ok = next_model(); !ok) return ok.error();
  std::uint64_t logits_version = current.version;  // the version that gave `last`
  torch::Tensor logits =
      current.model->forward_step(padded.to(model.device()), cache, mask.to(model.device()));
  torch::Tensor last = logits.select(1, longest - 1);  // [A, V]

  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  std::vector<std::size_t> active(prompts.size());
  for (std::size_t i = 0; i < active.size(); ++i) active[i] = i;

  for (int step = 0; !active.empty(); ++step) {
    torch::Tensor next = sample_tokens(last, options, gen);
    torch::Tensor logp = token_log_probs(last, next, options.temperature).to(torch::kCPU);
    torch::Tensor next_cpu = next.to(torch::kCPU);
    auto next_a = next_cpu.accessor<std::int64_t, 1>();
    auto logp_a = logp.accessor<float, 1>();
    std::vector<std::int64_t> keep;
    std::vector<std::size_t> still_active;
    for (std::size_t r = 0; r < active.size(); ++r) {
      const std::size_t i = active[r];
      Generation& g = results[i];
      const TokenId token = next_a[static_cast<std::int64_t>(r)];
      g.tokens.push_back(token);
      g.log_probs.push_back(logp_a[static_cast<std::int64_t>(r)]);
      g.versions.push_back(logits_version);
      if (is_byte(token)) g.text.push_back(static_cast<char>(static_cast<unsigned char>(token)));
      const auto total = static_cast<std::int64_t>(prompts[i].size() + g.tokens.size());
      bool done = true;
      if (token == kEos) {
        g.reason = StopReason::kEndOfSequence;
      } else if (stop && stop(i, g.text) == StopDecision::kStop) {
        g.reason = StopReason::kStopped;
      } else if (static_cast<int>(g.tokens.size()) >= options.max_new_tokens) {
        g.reason = StopReason::kMaxNewTokens;
      } else if (total >= config.max_seq_len) {
        g.reason = StopReason::kContextFull;
      } else {
        done = false;
      }
      if (!done) {
        keep.push_back(static_cast<std::int64_t>(r));
        still_active.push_back(i);
      }
    }
    if (still_active.empty()) break;
    if (still_active.size() != active.size()) {
      torch::Tensor rows = torch::tensor(keep, torch::kLong).to(model.device());
      cache.keep_rows(rows);
      next = next.index_select(0, rows);
    }
    active = std::move(still_active);
    if (auto ok = next_model(); !ok) return ok.error();  // a token boundary: new weights may come in
    logits_version = current.version;
    last = current.model->forward_step(next.unsqueeze(1), cache).select(1, 0);
  }
  return zorplex::Result<std::vector<Generation>>(std::move(results));
} catch (const std::exception& e) {
  return zorplex::Error{std::string("generation failed: ") + e.what()};
}

}  // namespace policy
