// The toy MoE (moe_model.h): layout, maps, values and the element check.
#include "moe_model.h"

#include <algorithm>
#include <numeric>
#include <random>

using namespace weightsync;

namespace moe {

namespace {

using Shape = std::vector<std::int64_t>;

std::string expert_name(std::int64_t layer, const char* w) {
  return "layers." + std::to_string(layer) + ".mlp.experts." + w;
}

// The bits of element `index` (global coordinates) of global tensor t at `version`.
std::uint32_t value_at(std::size_t t, const Shape& shape, const Shape& index, std::uint64_t version) {
  std::uint64_t linear = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + index[d];
  return static_cast<std::uint32_t>((t + 1) * 2654435761u + linear * 40503u + version * 97u);
}

template <typename F>
void for_each_index(const Shape& shape, F&& f) {
  Shape index(shape.size(), 0);
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  for (std::int64_t i = 0; i < n; ++i) {
    f(index);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// Global coordinates of local element `local` of a box holding `experts` along dim 0.
Shape to_global(const Box& box, const std::vector<std::int64_t>& experts, const Shape& local) {
  Shape global(local.size());
  for (std::size_t d = 0; d < local.size(); ++d) {
    global[d] = d == 0 ? experts[local[d]] : (box.start.empty() ? 0 : box.start[d]) + local[d];
  }
  return global;
}

std::size_t tensor_number(const ShardedSource& source, const std::string& name) {
  for (std::size_t t = 0; t < source.tensors.size(); ++t) {
    if (source.tensors[t].name == name) return t;
  }
  return 0;
}

}  // namespace

std::vector<GlobalTensor> Model::globals() const {
  std::vector<GlobalTensor> out;
  for (std::int64_t l = 0; l < layers; ++l) {
    out.push_back({expert_name(l, "w1"), DType::kFloat32, {experts, ff, d}});
    out.push_back({expert_name(l, "w2"), DType::kFloat32, {experts, d, ff}});
    out.push_back({expert_name(l, "w3"), DType::kFloat32, {experts, ff, d}});
  }
  return out;
}

ShardedSource Model::source() const {
  ShardedSource out{globals(), {}};
  const ExpertMap ep = ExpertMap::contiguous(experts, static_cast<std::size_t>(trainer_ep));
  for (const auto& held : ep.ranks) {
    for (std::int64_t t = 0; t < trainer_tp; ++t) {
      std::vector<TrainerShard> shards;
      for (const auto& g : out.tensors) {
        const std::size_t ff_dim = g.name.back() == '2' ? 2 : 1;  // w2 is [E, d, ff]
        shards.push_back({g.name, g.name, Box::split(g.shape, ff_dim, trainer_tp, t), held, 0});
      }
      out.ranks.push_back(std::move(shards));
    }
  }
  return out;
}

ShardedTarget Model::target(const ExpertMap& map) const {
  ShardedTarget out;
  for (const auto& local : map.ranks) {
    const auto n = static_cast<std::int64_t>(local.size());
    std::vector<DestinationTensor> tensors;
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".mlp.experts.";
      tensors.push_back({p + "w13_weight",
                         DType::kFloat32,
                         {n, 2 * ff, d},
                         {{expert_name(l, "w1"), Box::whole(), {0, 0, 0}, local, 0},
                          {expert_name(l, "w3"), Box::whole(), {0, ff, 0}, local, 0}}});
      tensors.push_back({p + "w2_weight",
                         DType::kFloat32,
                         {n, d, ff},
                         {{expert_name(l, "w2"), Box::whole(), {0, 0, 0}, local, 0}}});
    }
    out.ranks.push_back(std::move(tensors));
  }
  return out;
}

ExpertMap rebalanced_map(std::int64_t experts, std::size_t ranks, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<double> load(1.0);
  std::vector<double> loads(static_cast<std::size_t>(experts));
  for (double& l : loads) l = load(rng);
  std::vector<std::int64_t> order(loads.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return loads[a] > loads[b]; });
  ExpertMap map{experts, std::vector<std::vector<std::int64_t>>(ranks)};
  std::vector<double> rank_load(ranks, 0.0);
  const std::size_t per_rank = static_cast<std::size_t>(experts) / ranks;
  for (std::int64_t e : order) {
    std::size_t best = ranks;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (map.ranks[r].size() < per_rank && (best == ranks || rank_load[r] < rank_load[best])) best = r;
    }
    map.ranks[best].push_back(e);
    rank_load[best] += loads[static_cast<std::size_t>(e)];
  }
  return map;
}

void fill_trainer_rank(const ShardedSource& source, std::size_t r, const WeightLayout& layout,
                       std::uint64_t version, std::uint8_t* slot) {
  for (std::size_t i = 0; i < source.ranks[r].size(); ++i) {
    const TrainerShard& shard = source.ranks[r][i];
    const std::size_t t = tensor_number(source, shard.tensor);
    const TensorEntry& entry = layout.tensors()[i];
    auto* out = reinterpret_cast<std::uint32_t*>(slot + entry.offset);
    std::int64_t k = 0;
    for_each_index(entry.spec.shape, [&](const Shape& local) {
      out[k++] = value_at(t, source.tensors[t].shape, to_global(shard.box, shard.experts, local), version);
    });
  }
}

std::uint64_t wrong_elements(const ShardedSource& source, const std::vector<DestinationTensor>& tensors,
                             const std::map<std::string, std::vector<std::uint32_t>>& buffers,
                             std::uint64_t version, std::uint64_t* checked) {
  std::uint64_t wrong = 0;
  for (const DestinationTensor& dest : tensors) {
    const auto& got = buffers.at(dest.name);
    for (const DestinationPiece& piece : dest.pieces) {
      const std::size_t t = tensor_number(source, piece.tensor);
      Shape shape = source.tensors[t].shape;
      shape[0] = static_cast<std::int64_t>(piece.experts.size());
      for_each_index(shape, [&](const Shape& local) {
        std::int64_t linear = 0;
        for (std::size_t d = 0; d < shape.size(); ++d)
          linear = linear * dest.shape[d] + piece.at[d] + local[d];
        const std::uint32_t want =
            value_at(t, source.tensors[t].shape, to_global(piece.from, piece.experts, local), version);
        wrong += got[static_cast<std::size_t>(linear)] != want ? 1 : 0;
        ++*checked;
      });
    }
  }
  return wrong;
}

}  // namespace moe
