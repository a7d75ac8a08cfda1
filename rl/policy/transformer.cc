// policy/transformer.cc: see transformer.h.
#include "policy/transformer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <exception>
#include <limits>
#include <tuple>
#include <utility>

namespace policy {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const std::string tail(suffix);
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Packed rows (forward_segments): seg [B, T] int64 -> each token's position
// in its segment [B, T], and allowed [B, T, T]: query i may attend key j
// when j is a real token of its segment at or before i, and always itself.
std::pair<torch::Tensor, torch::Tensor> segment_layout(const torch::Tensor& seg) {
  const std::int64_t time = seg.size(1);
  const torch::Tensor index = torch::arange(time, seg.options()).unsqueeze(0);
  torch::Tensor starts = torch::ones_like(seg, torch::kBool);
  if (time > 1) {
    starts.narrow(1, 1, time - 1).copy_(seg.narrow(1, 1, time - 1) != seg.narrow(1, 0, time - 1));
  }
  // The index of the latest start at or before each token (0 is a start).
  const torch::Tensor start_index = std::get<0>(torch::cummax(index * starts.to(torch::kLong), 1));
  const torch::Tensor positions = index - start_index;
  const torch::Tensor q_index = index.view({1, time, 1});
  const torch::Tensor k_index = index.view({1, 1, time});
  const torch::Tensor allowed =
      ((seg.unsqueeze(2) == seg.unsqueeze(1)) & (seg > 0).unsqueeze(1) & (k_index <= q_index)) |
      (k_index == q_index);
  return {positions, allowed};
}

}  // namespace

void KVCache::keep_rows(const torch::Tensor& rows) {
  if (empty()) return;
  for (auto& k : keys) k = k.index_select(0, rows);
  for (auto& v : values) v = v.index_select(0, rows);
  valid = valid.index_select(0, rows);
  next_position = next_position.index_select(0, rows);
}

zorplex::Result<Transformer> Transformer::create(const ModelConfig& config, std::uint64_t seed,
                                                 torch::Device device) try {
  if (auto problem = config.validate()) return zorplex::Error{"invalid model config: " + *problem};
  torch::Tensor flat =
      torch::empty({parameter_count(config)}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  Transformer model(config, std::move(flat));
  model.initialize(seed);
  return zorplex::Result<Transformer>(std::move(model));
} catch (const std::exception& e) {
  return zorplex::Error{std::string("creating the model failed: ") + e.what()};
}

zorplex::Result<Transformer> Transformer::wrap(const ModelConfig& config, torch::Tensor flat) try {
  if (auto problem = config.validate()) return zorplex::Error{"invalid model config: " + *problem};
  if (!flat.defined() || flat.dim() != 1 || flat.scalar_type() != torch::kFloat32 || !flat.is_contiguous()) {
    return zorplex::Error{"the parameter buffer must be a defined, contiguous, 1-D float32 tensor"};
  }
  if (flat.numel() != parameter_count(config)) {
    return zorplex::Error{"the parameter buffer has " + std::to_string(flat.numel()) +
                          " elements; the config needs " + std::to_string(parameter_count(config))};
  }
  if (flat.requires_grad()) flat = flat.detach();
  return Transformer(config, std::move(flat));
} catch (const std::exception& e) {
  return zorplex::Error{std::string("wrapping the parameter buffer failed: ") + e.what()};
}

Transformer::Transformer(const ModelConfig& config, torch::Tensor flat)
    : config_(config), specs_(parameter_specs(config)), flat_(std::move(flat)) {
  params_.reserve(specs_.size());
  for (const ParamSpec& spec : specs_) {
    // detach(): a leaf over the same storage (and version counter) as the buffer.
    params_.push_back(
        flat_.narrow(0, spec.offset, spec.numel).view(spec.shape).detach().requires_grad_(true));
  }
  std::size_t i = 0;
  auto next = [&]() -> torch::Tensor { return params_.at(i++); };
  tok_emb_ = next();
  if (config_.positions == PositionEncoding::kLearned) pos_emb_ = next();
  for (std::int64_t l = 0; l < config_.n_layers; ++l) {
    Layer layer;
    layer.ln1_w = next();
    layer.ln1_b = next();
    layer.qkv_w = next();
    layer.qkv_b = next();
    layer.out_w = next();
    layer.out_b = next();
    layer.ln2_w = next();
    layer.ln2_b = next();
    layer.fc1_w = next();
    layer.fc1_b = next();
    layer.fc2_w = next();
    layer.fc2_b = next();
    layers_.push_back(std::move(layer));
  }
  final_w_ = next();
  final_b_ = next();
  head_w_ = config_.tie_embeddings ? tok_emb_ : next();

  if (config_.positions == PositionEncoding::kRotary) {
    const std::int64_t half = config_.head_dim() / 2;
    auto opts = torch::TensorOptions().dtype(torch::kFloat64);
    torch::Tensor inv_freq = torch::pow(
        config_.rope_theta, -torch::arange(0, half, opts) * 2.0 / static_cast<double>(config_.head_dim()));
    torch::Tensor angles = torch::outer(torch::arange(0, config_.max_seq_len, opts), inv_freq);
    rope_cos_ = angles.cos().to(torch::TensorOptions().dtype(torch::kFloat32).device(flat_.device()));
    rope_sin_ = angles.sin().to(torch::TensorOptions().dtype(torch::kFloat32).device(flat_.device()));
  }
}

torch::Tensor Transformer::parameter(const std::string& name) const {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == name) return params_[i];
  }
  return {};
}

void Transformer::initialize(std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  torch::Tensor host = torch::empty({flat_.numel()}, torch::kFloat32);
  for (const ParamSpec& spec : specs_) {
    torch::Tensor part = host.narrow(0, spec.offset, spec.numel);
    if (ends_with(spec.name, ".bias")) {
      part.zero_();
    } else if (ends_with(spec.name, "ln1.weight") || ends_with(spec.name, "ln2.weight") ||
               spec.name == "final_ln.weight") {
      part.fill_(1.0);
    } else {
      part.normal_(0.0, 0.02, gen);
    }
  }
  flat_.copy_(host);
}

void Transformer::zero_grad() {
  for (torch::Tensor& p : params_) p.mutable_grad() = torch::Tensor();
}

torch::Tensor Transformer::forward(const torch::Tensor& tokens, const torch::Tensor& mask) const {
  return run(tokens, mask, nullptr);
}

torch::Tensor Transformer::forward_step(const torch::Tensor& tokens, KVCache& cache,
                                        const torch::Tensor& mask) const {
  return run(tokens, mask, &cache);
}

torch::Tensor Transformer::forward_segments(const torch::Tensor& tokens,
                                            const torch::Tensor& segment_ids) const {
  TORCH_CHECK(segment_ids.defined(), "forward_segments needs segment ids");
  return run(tokens, {}, nullptr, segment_ids);
}

// x [B, H, T, Dh]; cos/sin [B, 1, T, Dh/2]. The two halves of each head are
// rotated as pairs (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos).
torch::Tensor Transformer::apply_rotary(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin) const {
  const std::int64_t half = config_.head_dim() / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half);
  torch::Tensor x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

torch::Tensor Transformer::run(const torch::Tensor& tokens, const torch::Tensor& mask, KVCache* cache,
                               const torch::Tensor& segments) const {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [batch, time], got ", tokens.sizes());
  const std::int64_t batch = tokens.size(0);
  const std::int64_t time = tokens.size(1);
  TORCH_CHECK(batch > 0 && time > 0, "tokens must not be empty");
  const auto device = flat_.device();
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  torch::Tensor ids = tokens.to(long_opts);
  const torch::Tensor seg = segments.defined() ? segments.to(long_opts) : torch::Tensor();
  TORCH_CHECK(!seg.defined() || (!mask.defined() && cache == nullptr),
              "segment ids take the place of the mask and need no cache");
  TORCH_CHECK(!seg.defined() || seg.sizes() == ids.sizes(), "segment ids must have the shape of tokens");
  torch::Tensor valid_new = seg.defined()    ? seg > 0
                            : mask.defined() ? mask.to(device).to(torch::kBool)
                                             : torch::ones({batch, time}, long_opts.dtype(torch::kBool));
  TORCH_CHECK(valid_new.sizes() == ids.sizes(), "mask must have the shape of tokens");
  const bool use_cache = cache != nullptr && !cache->empty();
  const std::int64_t past = use_cache ? cache->length() : 0;
  if (use_cache) {
    TORCH_CHECK(cache->batch_size() == batch, "the cache holds ", cache->batch_size(), " rows, tokens have ",
                batch);
    TORCH_CHECK(static_cast<std::int64_t>(cache->keys.size()) == config_.n_layers,
                "the cache is for another model");
  }
  torch::Tensor start = use_cache ? cache->next_position : torch::zeros({batch}, long_opts);
  // allowed[b, i, j]: query i (absolute past + i) may attend key j. Real keys
  // up to and including itself (of its own segment when packed), and always
  // itself (so that a padding query has a finite softmax; its output is
  // never used by a real token).
  torch::Tensor valid_all = use_cache ? torch::cat({cache->valid, valid_new}, 1) : valid_new;
  const std::int64_t keys_len = past + time;
  torch::Tensor positions, allowed;
  if (seg.defined()) {
    std::tie(positions, allowed) = segment_layout(seg);
  } else {
    positions = (start.unsqueeze(1) + valid_new.to(torch::kLong).cumsum(1) - 1).clamp_min(0);
    torch::Tensor q_index = torch::arange(past, past + time, long_opts).unsqueeze(1);
    torch::Tensor k_index = torch::arange(0, keys_len, long_opts).unsqueeze(0);
    allowed =
        (valid_all.unsqueeze(1) & (k_index <= q_index).unsqueeze(0)) | (k_index == q_index).unsqueeze(0);
  }
  TORCH_CHECK(positions.max().item<std::int64_t>() < config_.max_seq_len, "a position reaches max_seq_len (",
              config_.max_seq_len, ")");
  torch::Tensor bias =
      torch::zeros({batch, 1, time, keys_len}, torch::TensorOptions().device(device))
          .masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());

  const std::int64_t d = config_.d_model, h = config_.n_heads, dh = config_.head_dim();
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  torch::Tensor x = torch::embedding(tok_emb_, ids);
  if (config_.positions == PositionEncoding::kLearned) x = x + torch::embedding(pos_emb_, positions);
  torch::Tensor cos, sin;
  if (config_.positions == PositionEncoding::kRotary) {
    cos = torch::embedding(rope_cos_, positions).unsqueeze(1);
    sin = torch::embedding(rope_sin_, positions).unsqueeze(1);
  }
  if (cache != nullptr && !use_cache) {
    cache->keys.assign(config_.n_layers, torch::Tensor());
    cache->values.assign(config_.n_layers, torch::Tensor());
  }
  for (std::int64_t l = 0; l < config_.n_layers; ++l) {
    const Layer& p = layers_[l];
    torch::Tensor y = torch::layer_norm(x, {d}, p.ln1_w, p.ln1_b, config_.layer_norm_eps);
    torch::Tensor qkv =
        torch::linear(y, p.qkv_w, p.qkv_b).view({batch, time, 3, h, dh}).permute({2, 0, 3, 1, 4});
    torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];  // [B, H, T, Dh]
    if (config_.positions == PositionEncoding::kRotary) {
      q = apply_rotary(q, cos, sin);
      k = apply_rotary(k, cos, sin);
    }
    if (use_cache) {
      k = torch::cat({cache->keys[l], k}, 2);
      v = torch::cat({cache->values[l], v}, 2);
    }
    if (cache != nullptr) {
      cache->keys[l] = k;
      cache->values[l] = v;
    }
    torch::Tensor att = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * scale + bias, -1);
    torch::Tensor o = torch::matmul(att, v).transpose(1, 2).reshape({batch, time, d});
    x = x + torch::linear(o, p.out_w, p.out_b);
    y = torch::layer_norm(x, {d}, p.ln2_w, p.ln2_b, config_.layer_norm_eps);
    x = x + torch::linear(torch::gelu(torch::linear(y, p.fc1_w, p.fc1_b)), p.fc2_w, p.fc2_b);
  }
  if (cache != nullptr) {
    cache->valid = valid_all;
    cache->next_position = start + valid_new.to(torch::kLong).sum(1);
  }
  x = torch::layer_norm(x, {d}, final_w_, final_b_, config_.layer_norm_eps);
  return torch::linear(x, head_w_);
}

}  // namespace policy
