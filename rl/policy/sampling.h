// policy/sampling.h: batched generation with the policy, and the one
// definition of a token's log-probability that sampling and training share.
//
// Contract
// - Log-probability definition. With temperature t, the log-prob of token y
//   after logits z is log_softmax(z / t)[y]: the temperature-scaled model
//   distribution, which is the sampling distribution when top_p = 1. Greedy
//   decoding (t = 0) records log_softmax(z)[y] (t taken as 1). top_p < 1
//   truncates the distribution the token is drawn from, but the recorded
//   log-prob stays the temperature-scaled one (untruncated), so the trainer
//   recomputes exactly it with token_log_probs() / sequence_log_probs() and
//   the same temperature.
// - generate(): B prompts of any lengths (each 1..max_seq_len-1 tokens, ids in
//   the vocabulary) are left-padded into one batch (masked: padding never
//   changes a real token's logits; position ids start at 0 in every row), the
//   batch is prefilled once, then one token per step is sampled for every
//   unfinished row with the KV cache (finished rows leave the batch). A row
//   stops, in this order of checks after each token: EOS sampled (kEndOfSequence; the
//   EOS token and its log-prob are part of the result), the stop callback says
//   kStop (kStopped), max_new_tokens reached (kMaxNewTokens), prompt plus
//   generated tokens reach max_seq_len (kContextFull). The callback is called
//   after every sampled token other than EOS, with the row index and the text
//   generated so far (decode() of the tokens: bytes only); it plugs in the
//   Zorplex turn stop rule (zorplex::check_turn_stop(text, false, n)). At
//   EOS it is not called: the caller checks check_turn_stop(text, true).
// - Weights that change during generation (StepHook): when a hook is given,
//   generate() asks it for the model before the prefill and before every
//   decode step, and that step runs on the model it returns (the same one, or
//   one whose weights were just installed: the same config, another buffer).
//   Each token records the version of the model whose forward pass gave its
//   logits (Generation::versions). The KV cache is kept across a change: the
//   keys and values of earlier tokens stay as the older weights computed
//   them, and the recorded log-probs are those of the distribution the token
//   was actually drawn from (docs/rl_loop.md, "In-flight weight updates").
//   Without a hook every token records version 0.
// - Sampling draws from one CPU generator seeded with options.seed, so the
//   same model, prompts and options give the same tokens.
// - Errors: bad options or prompts come back as an Error naming the problem;
//   a torch failure (c10::Error) is caught and returned as an Error too.
// - Runs under torch::NoGradGuard; reads the model's parameters, so no write
//   into its buffer may overlap. Uses torch's intra-op threads (the caller
//   sets torch::set_num_threads). The callback runs on the calling thread.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/tokenizer.h"
#include "policy/transformer.h"
#include "zorplex/result.h"

namespace policy {

enum class StopReason { kEndOfSequence, kStopped, kMaxNewTokens, kContextFull };
const char* stop_reason_name(StopReason reason);  // "eos", "stopped", "max_new_tokens", "context_full"

enum class StopDecision { kContinue, kStop };
// (row index into the prompts, text generated so far) -> stop or continue.
using StopCallback = std::function<StopDecision(std::size_t index, std::string_view text)>;

struct SamplingOptions {
  int max_new_tokens = 150;  // the Zorplex per-turn budget
  double temperature = 1.0;  // 0: greedy (argmax)
  double top_p = 1.0;        // nucleus sampling when < 1; in (0, 1]
  std::uint64_t seed = 0;
};

// The model a step runs on, and the version its tokens record.
struct ModelAtStep {
  const Transformer* model = nullptr;
  std::uint64_t version = 0;
};
// Called on the generating thread before the prefill and before each decode
// step; it may install new weights and return the model over them.
using StepHook = std::function<ModelAtStep()>;

struct Generation {
  std::vector<TokenId> tokens;          // the sampled tokens (EOS included when it ended the row)
  std::vector<float> log_probs;         // one per token, as defined above
  std::vector<std::uint64_t> versions;  // one per token: the version of the model that gave its logits
  std::string text;                     // decode(tokens)
  StopReason reason = StopReason::kMaxNewTokens;
};

zorplex::Result<std::vector<Generation>> generate(const Transformer& model,
                                                  const std::vector<std::vector<TokenId>>& prompts,
                                                  const SamplingOptions& options,
                                                  const StopCallback& stop = nullptr,
                                                  const StepHook& hook = nullptr);

// log_softmax(logits / t)[target] with t = temperature > 0 ? temperature : 1.
// logits [..., V], targets [...] (int64) -> [...] float; differentiable.
torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& targets, double temperature);

// Teacher-forced log-probs of a batch of sequences: element [b, j] is the
// log-prob of tokens[b, j + 1] given tokens[b, 0..j] (shape [B, T - 1]), by
// the definition above. mask as Transformer::forward (right padding for
// training); differentiable when grad mode is on.
torch::Tensor sequence_log_probs(const Transformer& model, const torch::Tensor& tokens, double temperature,
                                 const torch::Tensor& mask = {});

}  // namespace policy
