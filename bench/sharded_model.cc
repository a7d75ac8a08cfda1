// ShardedModel: the synthetic model of `weightsync-bench sharded` and how it
// is split over trainer ranks (dim-0 blocks) and engine ranks (TP blocks).
#include <sstream>

#include "sharded.h"

namespace wsbench {

std::int64_t ShardedModel::rows() const {
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(width) * sizeof(float);
  return static_cast<std::int64_t>(matrix_bytes() / row_bytes);
}

std::string ShardedModel::check(int ranks, int readers) const {
  if (ranks < 1 || readers < 1) return "--ranks and --readers must be at least 1";
  if (matrices < 2 || matrices % 2 != 0) {
    return "--matrices must be even (half column-parallel, half row-parallel), not " +
           std::to_string(matrices);
  }
  if (width < 1 || width % readers != 0) {
    return "the width (" + std::to_string(width) + " columns) must divide by --readers " +
           std::to_string(readers);
  }
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(width) * sizeof(float);
  if (total_bytes % static_cast<std::uint64_t>(matrices) != 0 || matrix_bytes() % row_bytes != 0) {
    return "--size " + std::to_string(total_bytes) + " does not split into " + std::to_string(matrices) +
           " matrices of whole " + std::to_string(width) + "-float rows";
  }
  const std::int64_t r = rows();
  if (r % ranks != 0 || r % readers != 0) {
    return "each matrix has " + std::to_string(r) + " rows, which must divide by --ranks " +
           std::to_string(ranks) + " and by --readers " + std::to_string(readers) + " (pick another --size)";
  }
  return "";
}

std::string ShardedModel::name(int m) const {
  return "w" + std::to_string(m) + (split_dim(m) == 0 ? ".col" : ".row");
}

std::size_t ShardedModel::split_dim(int m) const {
  return m % 2 == 0 ? 0 : 1;
}

std::vector<weightsync::GlobalTensor> ShardedModel::tensors() const {
  std::vector<weightsync::GlobalTensor> out;
  for (int m = 0; m < matrices; ++m) {
    out.push_back(weightsync::GlobalTensor{name(m), weightsync::DType::kFloat32, {rows(), width}});
  }
  return out;
}

weightsync::ShardedSource ShardedModel::source(int ranks) const {
  weightsync::ShardedSource source;
  source.tensors = tensors();
  source.ranks.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (const auto& t : source.tensors) {
      weightsync::Box box =
          ranks == 1 ? weightsync::Box::whole() : weightsync::Box::split(t.shape, 0, ranks, r);
      source.ranks[static_cast<std::size_t>(r)].push_back(weightsync::TrainerShard{t.name, t.name, box});
    }
  }
  return source;
}

weightsync::ShardedTarget ShardedModel::target(int readers) const {
  weightsync::ShardedTarget target;
  target.ranks.resize(static_cast<std::size_t>(readers));
  const auto global = tensors();
  for (int g = 0; g < readers; ++g) {
    for (int m = 0; m < matrices; ++m) {
      const auto& t = global[static_cast<std::size_t>(m)];
      const weightsync::Box box = weightsync::Box::split(t.shape, split_dim(m), readers, g);
      weightsync::DestinationTensor dest;
      dest.name = t.name;
      dest.dtype = t.dtype;
      dest.shape = box.size;
      dest.pieces.push_back(weightsync::DestinationPiece{t.name, box, {0, 0}});
      target.ranks[static_cast<std::size_t>(g)].push_back(std::move(dest));
    }
  }
  return target;
}

std::string ShardedModel::encode() const {
  return std::to_string(total_bytes) + "," + std::to_string(width) + "," + std::to_string(matrices);
}

std::optional<ShardedModel> ShardedModel::decode(const std::string& text) {
  std::istringstream in(text);
  ShardedModel m;
  char c1 = 0, c2 = 0;
  if (!(in >> m.total_bytes >> c1 >> m.width >> c2 >> m.matrices) || c1 != ',' || c2 != ',')
    return std::nullopt;
  return m;
}

}  // namespace wsbench
