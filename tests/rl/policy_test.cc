// The Zorplex policy: tokenizer and prompt format, the model config and
// parameter layout, the transformer over one contiguous buffer (views,
// in-place updates, KV cache), sampling with log-probs that a teacher-forced
// recomputation reproduces, and safetensors checkpoints.
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "policy/model_config.h"
#include "policy/safetensors.h"
#include "policy/sampling.h"
#include "policy/tokenizer.h"
#include "policy/transformer.h"

using namespace policy;

namespace {

// Two threads (the machine has two cores), set once for the whole binary.
[[maybe_unused]] const bool kThreadsSet = [] {
  torch::set_num_threads(2);
  return true;
}();

ModelConfig tiny_config(PositionEncoding positions = PositionEncoding::kLearned, bool tied = true) {
  ModelConfig c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_ff = 64;
  c.max_seq_len = 96;
  c.positions = positions;
  c.tie_embeddings = tied;
  return c;
}

Transformer make_model(const ModelConfig& config, std::uint64_t seed = 1) {
  auto model = Transformer::create(config, seed);
  REQUIRE(model.ok());
  return std::move(model).value();
}

torch::Tensor as_tensor(const std::vector<TokenId>& ids) {
  return torch::tensor(ids, torch::kLong).unsqueeze(0);
}

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("ws_policy_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool bit_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  torch::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(),
                     static_cast<std::size_t>(ca.numel() * ca.element_size())) == 0;
}

// Checks every generated row against teacher forcing over prompt + tokens:
// one row at a time (B = 1, no padding) and all rows right-padded in one batch.
void check_log_probs(const Transformer& model, const std::vector<std::vector<TokenId>>& prompts,
                     const std::vector<Generation>& gens, double temperature) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<TokenId>> full;
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE(gens[i].tokens.size() == gens[i].log_probs.size());
    REQUIRE(!gens[i].tokens.empty());
    std::vector<TokenId> seq = prompts[i];
    seq.insert(seq.end(), gens[i].tokens.begin(), gens[i].tokens.end());
    longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(seq.size()));
    full.push_back(seq);
    torch::Tensor lp = sequence_log_probs(model, as_tensor(seq), temperature)[0];
    const auto p = static_cast<std::int64_t>(prompts[i].size());
    for (std::size_t j = 0; j < gens[i].tokens.size(); ++j) {
      const float recomputed = lp[p - 1 + static_cast<std::int64_t>(j)].item<float>();
      INFO("row " << i << " token " << j);
      CHECK(std::abs(recomputed - gens[i].log_probs[j]) < 1e-4);
    }
  }
  const auto batch = static_cast<std::int64_t>(full.size());
  torch::Tensor tokens = torch::full({batch, longest}, kPad, torch::kLong);
  torch::Tensor mask = torch::zeros({batch, longest}, torch::kBool);
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto n = static_cast<std::int64_t>(full[b].size());
    tokens[b].narrow(0, 0, n).copy_(torch::tensor(full[b], torch::kLong));
    mask[b].narrow(0, 0, n).fill_(true);
  }
  torch::Tensor lp = sequence_log_probs(model, tokens, temperature, mask);
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto p = static_cast<std::int64_t>(prompts[b].size());
    for (std::size_t j = 0; j < gens[b].tokens.size(); ++j) {
      INFO("batched row " << b << " token " << j);
      CHECK(std::abs(lp[b][p - 1 + static_cast<std::int64_t>(j)].item<float>() - gens[b].log_probs[j]) <
            1e-4);
    }
  }
}

std::vector<std::vector<TokenId>> zorplex_prompts() {
  PromptFormat format;
  format.system_prompt = "Use LOOKUP.";  // short: keeps the tiny model's contexts small
  return {encode_prompt(format, "What is zorplex('umbrella') + zorplex('dog')?"), encode_prompt(format, "Hi"),
          encode_prompt(PromptFormat{"", false}, "What is the zorplex value of 'cat'?")};
}

}  // namespace

TEST_CASE("tokenizer: bytes round trip and specials render by name", "[policy][tokenizer]") {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  const std::vector<TokenId> ids = encode(all);
  REQUIRE(ids.size() == 256);
  for (int c = 0; c < 256; ++c) CHECK(ids[c] == c);
  CHECK(decode(ids) == all);
  CHECK(decode(encode("LOOKUP[cat]\n[Result: 4]\n")) == "LOOKUP[cat]\n[Result: 4]\n");
  CHECK(decode({'a', kEos, 'b', kPad, 999, -1}) == "ab");
  CHECK(render({'a', kSystem, kUser, kAssistant, kEos, kPad, 300}) ==
        "a<|system|><|user|><|assistant|><|eos|><|pad|><|?300|>");
  CHECK(kVocabSize == 261);
}

TEST_CASE("tokenizer: the prompt format with and without the system part", "[policy][tokenizer]") {
  PromptFormat format;
  CHECK(format.include_system);
  CHECK(format.system_prompt.find("LOOKUP[word]") != std::string::npos);
  CHECK(format.system_prompt.find("[ANSWER]") != std::string::npos);
  CHECK(format.system_prompt.size() < 100);
  std::vector<TokenId> ids = encode_prompt(format, "What is 1?");
  CHECK(render(ids) == "<|system|>" + format.system_prompt + "<|user|>What is 1?<|assistant|>");
  format.include_system = false;
  CHECK(render(encode_prompt(format, "Q")) == "<|user|>Q<|assistant|>");
  format = PromptFormat{"sys", true};
  ids = encode_prompt(format, "Q");
  CHECK(ids == std::vector<TokenId>{kSystem, 's', 'y', 's', kUser, 'Q', kAssistant});
}

TEST_CASE("model config: the string map round trips and bad configs are named", "[policy][config]") {
  ModelConfig config = tiny_config(PositionEncoding::kRotary, false);
  config.layer_norm_eps = 1.2345678901234567e-6;
  auto back = ModelConfig::from_map(config.to_map());
  REQUIRE(back.ok());
  CHECK(back.value() == config);
  CHECK(ModelConfig().validate() == std::nullopt);

  auto map = config.to_map();
  map.erase("d_ff");
  auto missing = ModelConfig::from_map(map);
  REQUIRE(!missing.ok());
  CHECK(missing.error().message.find("d_ff") != std::string::npos);
  map = config.to_map();
  map["n_heads"] = "3";
  REQUIRE(!ModelConfig::from_map(map).ok());
  CHECK(ModelConfig::from_map(map).error().message.find("n_heads") != std::string::npos);
  map = config.to_map();
  map["positions"] = "alibi";
  CHECK(!ModelConfig::from_map(map).ok());
  map = config.to_map();
  map["d_model"] = "-5";
  CHECK(!ModelConfig::from_map(map).ok());
  map = config.to_map();
  map["d_model"] = "99999999999999999999999";
  CHECK(!ModelConfig::from_map(map).ok());

  ModelConfig bad;
  bad.n_layers = 0;
  CHECK(bad.validate().has_value());
  CHECK(!Transformer::create(bad).ok());
}

TEST_CASE("transformer: the default layout and parameter count", "[policy][model]") {
  const ModelConfig config;
  const auto specs = parameter_specs(config);
  REQUIRE(specs.size() == 2 + 12 * 4 + 2);
  CHECK(specs.front().name == "tok_embedding.weight");
  CHECK(specs.front().shape == std::vector<std::int64_t>{261, 128});
  CHECK(specs[1].name == "pos_embedding.weight");
  CHECK(specs[2].name == "layers.0.ln1.weight");
  CHECK(specs.back().name == "final_ln.bias");
  std::int64_t offset = 0;
  for (const ParamSpec& spec : specs) {
    CHECK(spec.offset == offset);
    CHECK(spec.byte_offset == 4 * offset);
    offset += spec.numel;
  }
  CHECK(parameter_count(config) == offset);
  CHECK(parameter_count(config) == 892288);
  ModelConfig untied = config;
  untied.tie_embeddings = false;
  CHECK(parameter_specs(untied).back().name == "lm_head.weight");
  CHECK(parameter_count(untied) == 892288 + 261 * 128);
  ModelConfig rotary = config;
  rotary.positions = PositionEncoding::kRotary;
  CHECK(parameter_count(rotary) == 892288 - 512 * 128);
}

TEST_CASE("transformer: every parameter is a view of the flat buffer", "[policy][model]") {
  for (bool tied : {true, false}) {
    Transformer model = make_model(tiny_config(PositionEncoding::kLearned, tied));
    torch::Tensor flat = model.flat_parameters();
    CHECK(flat.dim() == 1);
    CHECK(flat.is_contiguous());
    CHECK(flat.scalar_type() == torch::kFloat32);
    CHECK(!flat.requires_grad());
    CHECK(flat.numel() == parameter_count(model.config()));
    const auto* base = static_cast<const char*>(flat.data_ptr());
    REQUIRE(model.parameters().size() == model.specs().size());
    for (std::size_t i = 0; i < model.specs().size(); ++i) {
      const ParamSpec& spec = model.specs()[i];
      const torch::Tensor& p = model.parameters()[i];
      INFO(spec.name);
      CHECK(p.is_alias_of(flat));
      CHECK(p.requires_grad());
      CHECK(p.is_leaf());
      CHECK(p.sizes().vec() == spec.shape);
      CHECK(p.is_contiguous());
      CHECK(reinterpret_cast<std::uintptr_t>(p.data_ptr()) ==
            reinterpret_cast<std::uintptr_t>(base + spec.byte_offset));
      CHECK(spec.byte_offset + 4 * spec.numel <= flat.numel() * 4);
      CHECK(model.parameter(spec.name).data_ptr() == p.data_ptr());
    }
    // Initialisation: biases 0, LayerNorm weights 1, other weights N(0, 0.02).
    CHECK(model.parameter("layers.1.mlp.fc1.bias").abs().max().item<float>() == 0.0f);
    CHECK(model.parameter("layers.0.ln2.weight").eq(1.0f).all().item<bool>());
    const float std = model.parameter("layers.0.mlp.fc1.weight").std().item<float>();
    CHECK(std > 0.018f);
    CHECK(std < 0.022f);
    // Same seed, same weights; another seed, others.
    CHECK(bit_equal(flat, make_model(model.config(), 1).flat_parameters()));
    CHECK(!bit_equal(flat, make_model(model.config(), 2).flat_parameters()));
  }
}

TEST_CASE("transformer: an in-place write to the flat buffer changes the output", "[policy][model]") {
  Transformer model = make_model(tiny_config());
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = as_tensor(encode("LOOKUP[cat]"));
  torch::Tensor before = model.forward(tokens);
  torch::Tensor saved = model.flat_parameters().clone();
  // What a weight-sync pull does: bytes straight into the buffer.
  std::memcpy(model.flat_parameters().data_ptr(), torch::randn_like(saved).mul(0.02).data_ptr(),
              static_cast<std::size_t>(saved.numel()) * sizeof(float));
  torch::Tensor after = model.forward(tokens);
  CHECK((after - before).abs().max().item<float>() > 1e-3);
  model.flat_parameters().copy_(saved);
  CHECK(bit_equal(model.forward(tokens), before));
  // Wrapping a buffer: the same values give the same output.
  auto wrapped = Transformer::wrap(model.config(), saved.clone());
  REQUIRE(wrapped.ok());
  CHECK(bit_equal(wrapped.value().forward(tokens), before));
  CHECK(!Transformer::wrap(model.config(), torch::zeros({10})).ok());
}

TEST_CASE("transformer: one AdamW step updates the flat buffer in place", "[policy][model]") {
  Transformer model = make_model(tiny_config(PositionEncoding::kLearned, false));
  torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(1e-2));
  torch::Tensor flat = model.flat_parameters();
  const void* data = flat.data_ptr();
  torch::Tensor before = flat.clone();
  torch::Tensor tokens = as_tensor(encode("LOOKUP[dog]\n[Result: 95]\n[ANSWER] 95"));
  torch::Tensor loss = -sequence_log_probs(model, tokens, 1.0).mean();
  optimizer.zero_grad();
  loss.backward();
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    INFO(model.specs()[i].name);
    REQUIRE(model.parameters()[i].grad().defined());
  }
  optimizer.step();
  CHECK(flat.data_ptr() == data);
  CHECK(model.flat_parameters().data_ptr() == data);
  torch::Tensor changed = flat.ne(before);
  // Every parameter moved (AdamW's first step moves each element with a nonzero grad).
  for (const ParamSpec& spec : model.specs()) {
    INFO(spec.name);
    CHECK(changed.narrow(0, spec.offset, spec.numel).any().item<bool>());
  }
  // And the step lowered the loss.
  torch::Tensor loss2 = -sequence_log_probs(model, tokens, 1.0).mean();
  CHECK(loss2.item<float>() < loss.item<float>());
}

TEST_CASE("transformer: teacher forcing equals incremental KV-cache decoding", "[policy][model]") {
  for (auto positions : {PositionEncoding::kLearned, PositionEncoding::kRotary}) {
    INFO(position_encoding_name(positions));
    Transformer model = make_model(tiny_config(positions), 7);
    torch::NoGradGuard no_grad;
    torch::Tensor tokens = torch::randint(0, kVocabSize, {3, 40}, torch::kLong);
    torch::Tensor full = model.forward(tokens);
    REQUIRE(full.sizes() == torch::IntArrayRef({3, 40, kVocabSize}));
    // Prefill 10, then pieces of 1, 5 and 1 token at a time.
    KVCache cache;
    std::vector<torch::Tensor> parts;
    parts.push_back(model.forward_step(tokens.narrow(1, 0, 10), cache));
    parts.push_back(model.forward_step(tokens.narrow(1, 10, 1), cache));
    parts.push_back(model.forward_step(tokens.narrow(1, 11, 5), cache));
    for (std::int64_t t = 16; t < 40; ++t) parts.push_back(model.forward_step(tokens.narrow(1, t, 1), cache));
    CHECK(cache.length() == 40);
    torch::Tensor incremental = torch::cat(parts, 1);
    CHECK((incremental - full).abs().max().item<float>() < 1e-4);

    // Left padding (masked) gives every row the logits of its unpadded self.
    torch::Tensor padded = torch::full({2, 12}, kPad, torch::kLong);
    torch::Tensor mask = torch::zeros({2, 12}, torch::kBool);
    padded[0].narrow(0, 4, 8).copy_(tokens[0].narrow(0, 0, 8));
    mask[0].narrow(0, 4, 8).fill_(true);
    padded[1].copy_(tokens[1].narrow(0, 0, 12));
    mask[1].fill_(true);
    torch::Tensor out = model.forward(padded, mask);
    CHECK((out[0].narrow(0, 4, 8) - full[0].narrow(0, 0, 8)).abs().max().item<float>() < 1e-4);
    CHECK((out[1] - full[1].narrow(0, 0, 12)).abs().max().item<float>() < 1e-4);
    CHECK(torch::isfinite(out).all().item<bool>());
  }
}

TEST_CASE("sampling: greedy log-probs equal a teacher-forced recomputation, batched", "[policy][sampling]") {
  for (auto positions : {PositionEncoding::kLearned, PositionEncoding::kRotary}) {
    Transformer model = make_model(tiny_config(positions), 3);
    const auto prompts = zorplex_prompts();
    SamplingOptions options;
    options.temperature = 0.0;
    options.max_new_tokens = 20;
    auto gens = generate(model, prompts, options);
    REQUIRE(gens.ok());
    REQUIRE(gens.value().size() == 3);
    check_log_probs(model, prompts, gens.value(), 0.0);
    // Greedy is the argmax of the teacher-forced logits, and batching does not change it.
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      auto alone = generate(model, {prompts[i]}, options);
      REQUIRE(alone.ok());
      CHECK(alone.value()[0].tokens == gens.value()[i].tokens);
    }
  }
}

TEST_CASE("sampling: temperature and top-p log-probs equal a teacher-forced recomputation",
          "[policy][sampling]") {
  Transformer model = make_model(tiny_config(), 5);
  const auto prompts = zorplex_prompts();
  for (double temperature : {1.0, 0.7}) {
    for (double top_p : {1.0, 0.9}) {
      INFO("temperature " << temperature << " top_p " << top_p);
      SamplingOptions options;
      options.temperature = temperature;
      options.top_p = top_p;
      options.max_new_tokens = 30;
      options.seed = 11;
      auto gens = generate(model, prompts, options);
      REQUIRE(gens.ok());
      check_log_probs(model, prompts, gens.value(), temperature);
      // Same seed, same samples.
      auto again = generate(model, prompts, options);
      REQUIRE(again.ok());
      for (std::size_t i = 0; i < prompts.size(); ++i)
        CHECK(again.value()[i].tokens == gens.value()[i].tokens);
    }
  }
}

TEST_CASE("sampling: weights installed at a token boundary: the new model samples on, over the kept KV cache",
          "[policy][sampling]") {
  Transformer old_weights = make_model(tiny_config(), 3);
  Transformer new_weights = make_model(tiny_config(), 8);
  const std::vector<TokenId> prompt = zorplex_prompts()[0];
  SamplingOptions options;
  options.temperature = 0.0;  // greedy: every token is the argmax of the logits it came from
  options.max_new_tokens = 16;
  constexpr int kSwitchAfter = 6;  // hook calls: the prefill, then one per decode step
  int calls = 0;
  const StepHook hook = [&]() -> ModelAtStep {
    ++calls;
    return calls <= kSwitchAfter ? ModelAtStep{&old_weights, 4} : ModelAtStep{&new_weights, 5};
  };
  auto mixed = generate(old_weights, {prompt}, options, nullptr, hook);
  REQUIRE(mixed.ok());
  const Generation& g = mixed.value()[0];
  REQUIRE(g.tokens.size() == 16);
  REQUIRE(g.versions.size() == 16);
  for (std::size_t i = 0; i < g.versions.size(); ++i) CHECK(g.versions[i] == (i < kSwitchAfter ? 4u : 5u));

  // The same steps by hand: the old model prefills and decodes the first six
  // tokens; the new one decodes on over the same cache (kept, not recomputed).
  torch::NoGradGuard no_grad;
  KVCache cache;
  torch::Tensor input =
      torch::tensor(std::vector<std::int64_t>(prompt.begin(), prompt.end()), torch::kLong).unsqueeze(0);
  torch::Tensor logits = old_weights.forward_step(input, cache).select(1, -1);
  for (std::size_t i = 0; i < g.tokens.size(); ++i) {
    const std::int64_t expected = logits.argmax(-1).item<std::int64_t>();
    INFO("token " << i);
    REQUIRE(g.tokens[i] == expected);
    const float log_prob = torch::log_softmax(logits, -1)[0][expected].item<float>();
    CHECK(std::abs(g.log_probs[i] - log_prob) < 1e-4);
    const Transformer& next = static_cast<int>(i) + 1 < kSwitchAfter ? old_weights : new_weights;
    logits = next.forward_step(torch::tensor({expected}, torch::kLong).unsqueeze(0), cache).select(1, -1);
  }
  // The tokens after the switch are not what the old model alone would say.
  auto old_only = generate(old_weights, {prompt}, options);
  REQUIRE(old_only.ok());
  CHECK(std::equal(g.tokens.begin(), g.tokens.begin() + kSwitchAfter, old_only.value()[0].tokens.begin()));
  CHECK(g.tokens != old_only.value()[0].tokens);
  // Without a hook every token records version 0; a hook must return a model of the same config.
  for (std::uint64_t v : old_only.value()[0].versions) CHECK(v == 0);
  Transformer other = make_model(tiny_config(PositionEncoding::kRotary), 3);
  auto refused = generate(old_weights, {prompt}, options, nullptr, [&] { return ModelAtStep{&other, 1}; });
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("another config"));
}

TEST_CASE("sampling: EOS, the stop callback, the token budget and the context end rows",
          "[policy][sampling]") {
  Transformer model = make_model(tiny_config(), 9);
  const auto prompts = zorplex_prompts();
  SamplingOptions options;
  options.temperature = 1.0;
  options.max_new_tokens = 12;
  options.seed = 4;
  std::vector<int> calls(prompts.size(), 0);
  auto gens = generate(model, prompts, options, [&](std::size_t index, std::string_view text) {
    ++calls[index];
    CHECK(text.size() <= static_cast<std::size_t>(calls[index]));
    return index == 1 && calls[index] == 3 ? StopDecision::kStop : StopDecision::kContinue;
  });
  REQUIRE(gens.ok());
  CHECK(gens.value()[1].reason == StopReason::kStopped);
  CHECK(gens.value()[1].tokens.size() == 3);
  CHECK(gens.value()[0].reason == StopReason::kMaxNewTokens);
  CHECK(gens.value()[0].tokens.size() == 12);
  CHECK(gens.value()[0].text == decode(gens.value()[0].tokens));
  CHECK(gens.value()[2].tokens.size() == 12);

  // A model that always says EOS: output = final_ln.bias . embedding, with
  // final_ln.weight 0 and the EOS row along the bias.
  {
    torch::NoGradGuard no_grad;
    model.parameter("final_ln.weight").zero_();
    model.parameter("final_ln.bias").fill_(1.0);
    model.parameter("tok_embedding.weight")[kEos].fill_(1.0);
  }
  auto eos = generate(model, prompts, options);
  REQUIRE(eos.ok());
  for (const Generation& g : eos.value()) {
    CHECK(g.reason == StopReason::kEndOfSequence);
    CHECK(g.tokens == std::vector<TokenId>{kEos});
    CHECK(g.text.empty());
  }
  check_log_probs(model, prompts, eos.value(), 1.0);

  // The context: a prompt of max_seq_len - 2 tokens has room for two.
  Transformer fresh = make_model(tiny_config(), 9);
  std::vector<TokenId> long_prompt(static_cast<std::size_t>(fresh.config().max_seq_len - 2), 'a');
  auto full = generate(fresh, {long_prompt, prompts[1]}, options);
  REQUIRE(full.ok());
  if (full.value()[0].reason != StopReason::kEndOfSequence) {
    CHECK(full.value()[0].reason == StopReason::kContextFull);
    CHECK(full.value()[0].tokens.size() == 2);
  }
}

TEST_CASE("sampling: bad options and prompts are errors", "[policy][sampling]") {
  Transformer model = make_model(tiny_config());
  SamplingOptions options;
  CHECK(generate(model, {}, options).ok());
  CHECK(!generate(model, {{}}, options).ok());
  CHECK(!generate(model, {{1, 2, 999}}, options).ok());
  CHECK(!generate(model, {std::vector<TokenId>(96, 'a')}, options).ok());
  options.temperature = -1;
  CHECK(!generate(model, {{1}}, options).ok());
  options.temperature = 1;
  options.top_p = 0;
  CHECK(!generate(model, {{1}}, options).ok());
  options.top_p = 1;
  options.max_new_tokens = 0;
  auto none = generate(model, {{1}}, options);
  REQUIRE(none.ok());
  CHECK(none.value()[0].tokens.empty());
}

TEST_CASE("safetensors: a model round trip is bit-exact and the metadata carries the config",
          "[policy][safetensors]") {
  const auto dir = temp_dir();
  for (auto positions : {PositionEncoding::kLearned, PositionEncoding::kRotary}) {
    Transformer model = make_model(tiny_config(positions, positions == PositionEncoding::kRotary), 21);
    const std::string path = (dir / "model.safetensors").string();
    auto written = save_model(path, model, {{"step", "17"}});
    REQUIRE(written.ok());
    CHECK(written.value() == std::filesystem::file_size(path));
    auto contents = read_safetensors(path);
    REQUIRE(contents.ok());
    CHECK(contents.value().metadata.at("step") == "17");
    CHECK(contents.value().metadata.at("format") == kPolicyFormat);
    CHECK(ModelConfig::from_map(contents.value().metadata).value() == model.config());
    auto loaded = load_model(path);
    REQUIRE(loaded.ok());
    CHECK(loaded.value().config() == model.config());
    CHECK(bit_equal(loaded.value().flat_parameters(), model.flat_parameters()));
    // Into an existing model's buffer, in place.
    Transformer other = make_model(model.config(), 99);
    const void* data = other.flat_parameters().data_ptr();
    auto copied = load_model_into(path, other);
    REQUIRE(copied.ok());
    CHECK(copied.value() == static_cast<std::int64_t>(model.specs().size()));
    CHECK(other.flat_parameters().data_ptr() == data);
    CHECK(bit_equal(other.flat_parameters(), model.flat_parameters()));
    // Another config is refused.
    Transformer bigger = make_model(tiny_config(PositionEncoding::kLearned, false), 1);
    if (bigger.config() != model.config()) CHECK(!load_model_into(path, bigger).ok());
  }
  // No temporary file left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
  }
  CHECK(!save_model((dir / "no-such-dir" / "x.safetensors").string(), make_model(tiny_config())).ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("safetensors: the file follows the spec byte for byte", "[policy][safetensors]") {
  // python3 -c "import safetensors" fails on this machine, so the layout is
  // checked here against the format's definition.
  Transformer model = make_model(tiny_config(), 2);
  auto bytes = serialize_safetensors(
      [&] {
        std::vector<NamedTensor> t;
        for (std::size_t i = 0; i < model.specs().size(); ++i)
          t.push_back({model.specs()[i].name, model.parameters()[i]});
        return t;
      }(),
      model.config().to_map());
  REQUIRE(bytes.ok());
  const std::string& file = bytes.value();
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);  // little endian
  REQUIRE(n % 8 == 0);
  REQUIRE(8 + n <= file.size());
  CHECK(file[8] == '{');
  auto header = nlohmann::ordered_json::parse(file.substr(8, n));
  REQUIRE(header.is_object());
  REQUIRE(header.contains("__metadata__"));
  CHECK(header["__metadata__"]["d_model"] == "32");
  std::uint64_t expected = 0;
  std::size_t index = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const ParamSpec& spec = model.specs().at(index);
    INFO(spec.name);
    CHECK(it.key() == spec.name);
    CHECK(it.value()["dtype"] == "F32");
    CHECK(it.value()["shape"].get<std::vector<std::int64_t>>() == spec.shape);
    const auto offsets = it.value()["data_offsets"].get<std::vector<std::uint64_t>>();
    REQUIRE(offsets.size() == 2);
    CHECK(offsets[0] == expected);
    CHECK(offsets[0] == static_cast<std::uint64_t>(spec.byte_offset));  // data order = buffer order
    CHECK(offsets[1] - offsets[0] == static_cast<std::uint64_t>(spec.numel) * 4);
    CHECK(std::memcmp(file.data() + 8 + n + offsets[0], model.parameters()[index].data_ptr(),
                      offsets[1] - offsets[0]) == 0);
    expected = offsets[1];
    ++index;
  }
  CHECK(index == model.specs().size());
  CHECK(8 + n + expected == file.size());
  // The data section is the flat buffer itself, byte for byte.
  CHECK(std::memcmp(file.data() + 8 + n, model.flat_parameters().data_ptr(), expected) == 0);
}

TEST_CASE("safetensors: other dtypes and extra tensors round trip", "[policy][safetensors]") {
  std::vector<NamedTensor> tensors = {
      {"exp_avg", torch::randn({3, 5})},
      {"step", torch::tensor({int64_t{42}}, torch::kLong)},
      {"scalar", torch::tensor(3.5, torch::kFloat64)},
      {"half", torch::randn({4}).to(torch::kFloat16)},
      {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"mask", torch::tensor({true, false, true})},
      {"bytes", torch::randint(0, 255, {7}, torch::kUInt8)},
      {"empty", torch::zeros({0, 3})},
      {"strided", torch::randn({4, 6}).t()},  // non-contiguous: written row-major
  };
  auto bytes = serialize_safetensors(tensors, {{"kind", "optimizer"}});
  REQUIRE(bytes.ok());
  auto parsed = parse_safetensors(bytes.value());
  REQUIRE(parsed.ok());
  REQUIRE(parsed.value().tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].name);
    CHECK(parsed.value().tensors[i].name == tensors[i].name);
    CHECK(bit_equal(parsed.value().tensors[i].tensor, tensors[i].tensor));
  }
  CHECK(parsed.value().metadata.at("kind") == "optimizer");
  CHECK(!serialize_safetensors({{"a", torch::zeros({1})}, {"a", torch::zeros({1})}}).ok());
  CHECK(!serialize_safetensors({{"__metadata__", torch::zeros({1})}}).ok());
  CHECK(!serialize_safetensors({{"c", torch::zeros({1}, torch::kComplexFloat)}}).ok());
}

TEST_CASE("safetensors: truncated and corrupted files are errors, never crashes", "[policy][safetensors]") {
  Transformer model = make_model(tiny_config(), 2);
  const auto dir = temp_dir();
  const std::string path = (dir / "model.safetensors").string();
  REQUIRE(save_model(path, model).ok());
  const std::string file = read_file(path);
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);

  // Every truncation is an error.
  std::mt19937 rng(5);
  std::vector<std::size_t> cuts = {0, 1, 7, 8, 9, 8 + n - 1, 8 + n, 8 + n + 1, file.size() - 1};
  for (int i = 0; i < 200; ++i)
    cuts.push_back(std::uniform_int_distribution<std::size_t>(0, file.size() - 1)(rng));
  for (std::size_t cut : cuts) {
    INFO("cut at " << cut);
    CHECK(!parse_safetensors(std::string_view(file).substr(0, cut)).ok());
  }
  // Trailing bytes too.
  CHECK(!parse_safetensors(file + "x").ok());

  auto with_header = [&](std::string header) {
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    const std::uint64_t len = header.size();
    std::memcpy(out.data(), &len, 8);
    return out + header + std::string(16, '\0');
  };
  CHECK(parse_safetensors(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})")).ok());
  const char* bad[] = {
      R"(not json)",
      R"([1,2])",
      R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})",                         // size mismatch
      R"({"a":{"dtype":"F99","shape":[4],"data_offsets":[0,16]}})",                         // dtype
      R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})",                        // negative dim
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})",                         // begin > end
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,17]}})",                         // past the end
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",                         // hole
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",                          // trailing bytes
      R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})",  // overflow
      R"({"a":{"dtype":"F32","shape":[4]}})",                                               // no offsets
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"__metadata__":{"k":1}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
  };
  for (const char* header : bad) {
    INFO(header);
    auto parsed = parse_safetensors(with_header(header));
    CHECK(!parsed.ok());
    if (!parsed.ok()) CHECK(!parsed.error().message.empty());
  }
  // A header length far past the file.
  std::string huge = file;
  const std::uint64_t big = 1ull << 40;
  std::memcpy(huge.data(), &big, 8);
  CHECK(!parse_safetensors(huge).ok());

  // Random byte flips anywhere in the header: an error, or a file that parses
  // (a flipped letter in a name); never a crash. A checkpoint with a renamed
  // parameter does not load.
  for (int i = 0; i < 300; ++i) {
    std::string corrupt = file;
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, 8 + n - 1)(rng);
    corrupt[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    (void)parse_safetensors(corrupt);
  }
  std::string renamed = file;
  const auto pos = renamed.find("layers.0.ln1.bias");
  REQUIRE(pos != std::string::npos);
  renamed[pos] = 'L';
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << renamed;
  }
  auto loaded = load_model(path);
  REQUIRE(!loaded.ok());
  CHECK(loaded.error().message.find("missing") != std::string::npos);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << file.substr(0, file.size() / 2);
  }
  loaded = load_model(path);
  REQUIRE(!loaded.ok());
  CHECK(loaded.error().message.find("truncated") != std::string::npos);
  CHECK(!load_model((dir / "absent.safetensors").string()).ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("policy: speed of the default model", "[.][perf]") {
  if (const char* threads = std::getenv("WS_POLICY_THREADS")) torch::set_num_threads(std::atoi(threads));
  std::cout << "threads: " << torch::get_num_threads() << "\n";
  Transformer model = make_model(ModelConfig(), 1);
  std::cout << "parameters: " << parameter_count(model.config()) << "\n";
  torch::Tensor tokens = torch::randint(0, 256, {8, 256}, torch::kLong);
  {
    torch::NoGradGuard no_grad;
    model.forward(tokens);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) model.forward(tokens);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;
    std::cout << "forward [8, 256] no grad: " << s * 1e3 << " ms (" << 8 * 256 / s << " tokens/s)\n";
  }
  {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i) {
      model.zero_grad();
      sequence_log_probs(model, tokens, 1.0).mean().backward();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 3;
    std::cout << "forward+backward [8, 256]: " << s * 1e3 << " ms\n";
  }
  PromptFormat format;
  std::vector<std::vector<TokenId>> prompts(
      8, encode_prompt(format, "What is zorplex('umbrella') + zorplex('dog')?"));
  for (int b : {1, 8}) {
    SamplingOptions options;
    options.max_new_tokens = 150;
    std::vector<std::vector<TokenId>> batch(prompts.begin(), prompts.begin() + b);
    auto t0 = std::chrono::steady_clock::now();
    auto gens = generate(model, batch, options);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(gens.ok());
    std::size_t total = 0;
    for (const auto& g : gens.value()) total += g.tokens.size();
    std::cout << "generate B=" << b << ": " << total << " tokens in " << s << " s (" << total / s
              << " tokens/s)\n";
  }
}

// Prints the layout table of docs/policy.md from parameter_specs():
// ws_policy_tests "[layout-table]"
TEST_CASE("policy: the default layout table for docs/policy.md", "[.][layout-table]") {
  const ModelConfig config;
  std::cout << "| # | name | shape | elements | offset (elements) | byte offset |\n";
  std::cout << "|---:|---|---|---:|---:|---:|\n";
  const auto specs = parameter_specs(config);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string shape;
    for (std::int64_t d : specs[i].shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::cout << "| " << i << " | `" << specs[i].name << "` | [" << shape << "] | " << specs[i].numel << " | "
              << specs[i].offset << " | " << specs[i].byte_offset << " |\n";
  }
  std::cout << "| | total | | " << parameter_count(config) << " | | " << 4 * parameter_count(config)
            << " bytes |\n";
}
