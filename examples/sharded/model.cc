// The example's model and its trainer and engine shardings (model.h).
#include "model.h"

namespace sharded {

using weightsync::Box;
using weightsync::DestinationPiece;
using weightsync::DestinationTensor;
using weightsync::GlobalTensor;
using Shape = std::vector<std::int64_t>;

namespace {

std::string layer_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}

DestinationPiece piece(const std::string& tensor, Box from, Shape at) {
  return DestinationPiece{tensor, std::move(from), std::move(at)};
}

}  // namespace

void add_model_options(CLI::App& app, ModelOptions& model) {
  app.add_option("--layers", model.layers, "Transformer layers")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--hidden", model.hidden, "Hidden size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--kv-hidden", model.kv_hidden, "Rows of k and of v (grouped-query attention)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--ffn", model.ffn, "Feed-forward size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--vocab", model.vocab, "Vocabulary size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

std::vector<std::string> model_arguments(const ModelOptions& model) {
  return {"--layers",    std::to_string(model.layers),    "--hidden", std::to_string(model.hidden),
          "--kv-hidden", std::to_string(model.kv_hidden), "--ffn",    std::to_string(model.ffn),
          "--vocab",     std::to_string(model.vocab)};
}

std::string check_divisible(const ModelOptions& model, int trainer_ranks, int engine_ranks) {
  if (trainer_ranks < 1 || engine_ranks < 1) return "need at least one trainer rank and one engine rank";
  const std::vector<std::pair<const char*, std::int64_t>> dims = {{"--hidden", model.hidden},
                                                                  {"--kv-hidden", model.kv_hidden},
                                                                  {"--ffn", model.ffn},
                                                                  {"--vocab", model.vocab}};
  for (const auto& [name, size] : dims) {
    // Every matrix has a dim 0 of one of these sizes (trainer rows); the
    // engine splits each of them too (rows or columns).
    if (size % trainer_ranks != 0) {
      return std::string(name) + " " + std::to_string(size) + " does not split over " +
             std::to_string(trainer_ranks) + " trainer ranks";
    }
    if (size % engine_ranks != 0) {
      return std::string(name) + " " + std::to_string(size) +
             " does not split over TP=" + std::to_string(engine_ranks);
    }
  }
  return "";
}

std::vector<GlobalTensor> global_tensors(const ModelOptions& m) {
  const auto f32 = weightsync::DType::kFloat32;
  std::vector<GlobalTensor> out = {{"embed", f32, {m.vocab, m.hidden}}};
  for (int i = 0; i < m.layers; ++i) {
    out.push_back({layer_name(i, "q"), f32, {m.hidden, m.hidden}});
    out.push_back({layer_name(i, "k"), f32, {m.kv_hidden, m.hidden}});
    out.push_back({layer_name(i, "v"), f32, {m.kv_hidden, m.hidden}});
    out.push_back({layer_name(i, "o"), f32, {m.hidden, m.hidden}});
    out.push_back({layer_name(i, "gate"), f32, {m.ffn, m.hidden}});
    out.push_back({layer_name(i, "up"), f32, {m.ffn, m.hidden}});
    out.push_back({layer_name(i, "down"), f32, {m.hidden, m.ffn}});
    out.push_back({layer_name(i, "norm"), f32, {m.hidden}});
  }
  return out;
}

weightsync::ShardedSource trainer_source(const ModelOptions& model, int ranks) {
  weightsync::ShardedSource source;
  source.tensors = global_tensors(model);
  source.ranks.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (const auto& t : source.tensors) {
      const Box box = t.shape[0] % ranks == 0 ? Box::split(t.shape, 0, ranks, r) : Box::whole();
      source.ranks[static_cast<std::size_t>(r)].push_back({t.name, t.name, box});
    }
  }
  return source;
}

weightsync::ShardedTarget engine_target(const ModelOptions& m, int ranks) {
  const auto f32 = weightsync::DType::kFloat32;
  const std::int64_t tp = ranks;
  const Shape square{m.hidden, m.hidden}, kv{m.kv_hidden, m.hidden};
  const Shape ffn_in{m.ffn, m.hidden}, ffn_out{m.hidden, m.ffn};
  weightsync::ShardedTarget target;
  target.ranks.resize(static_cast<std::size_t>(ranks));
  for (std::int64_t g = 0; g < tp; ++g) {
    auto& tensors = target.ranks[static_cast<std::size_t>(g)];
    tensors.push_back(DestinationTensor{"embed",
                                        f32,
                                        {m.vocab / tp, m.hidden},
                                        {piece("embed", Box::split({m.vocab, m.hidden}, 0, tp, g), {0, 0})}});
    for (int i = 0; i < m.layers; ++i) {
      const std::int64_t q_rows = m.hidden / tp, kv_rows = m.kv_hidden / tp, ffn_rows = m.ffn / tp;
      tensors.push_back(
          DestinationTensor{layer_name(i, "qkv"),
                            f32,
                            {q_rows + 2 * kv_rows, m.hidden},
                            {piece(layer_name(i, "q"), Box::split(square, 0, tp, g), {0, 0}),
                             piece(layer_name(i, "k"), Box::split(kv, 0, tp, g), {q_rows, 0}),
                             piece(layer_name(i, "v"), Box::split(kv, 0, tp, g), {q_rows + kv_rows, 0})}});
      tensors.push_back(DestinationTensor{layer_name(i, "o"),
                                          f32,
                                          {m.hidden, q_rows},
                                          {piece(layer_name(i, "o"), Box::split(square, 1, tp, g), {0, 0})}});
      tensors.push_back(
          DestinationTensor{layer_name(i, "gate_up"),
                            f32,
                            {2 * ffn_rows, m.hidden},
                            {piece(layer_name(i, "gate"), Box::split(ffn_in, 0, tp, g), {0, 0}),
                             piece(layer_name(i, "up"), Box::split(ffn_in, 0, tp, g), {ffn_rows, 0})}});
      tensors.push_back(
          DestinationTensor{layer_name(i, "down"),
                            f32,
                            {m.hidden, ffn_rows},
                            {piece(layer_name(i, "down"), Box::split(ffn_out, 1, tp, g), {0, 0})}});
      tensors.push_back(DestinationTensor{
          layer_name(i, "norm"), f32, {m.hidden}, {piece(layer_name(i, "norm"), Box::whole(), {0})}});
    }
  }
  return target;
}

}  // namespace sharded
