// RoutingPlan: plans executed by simulation (memcpy from trainer rank buffers
// laid out by rank_layout into engine rank buffers) and compared with
// destinations built element by element from the global tensors; read shapes
// (one strided read per intersection); bind(); the validation errors; and the
// time to plan 1,000 tensors over 8 trainer x 4 engine ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "weightsync/sharding.h"

using namespace weightsync;

namespace {

using Shape = std::vector<std::int64_t>;
using Bytes = std::vector<std::uint8_t>;
using TensorBytes = std::map<std::string, Bytes>;

// ---------------------------------------------------------------------------
// Element-wise reference copies (independent of the plan's strided runs).

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t linear_index(const Shape& shape, const Shape& index) {
  std::int64_t linear = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + index[d];
  return linear;
}

// Copies the box of `extent` elements at `src_start` of a row-major tensor of
// `src_shape` to `dest_start` of one of `dest_shape`, one element at a time.
void copy_box(const std::uint8_t* src, const Shape& src_shape, const Shape& src_start, std::uint8_t* dest,
              const Shape& dest_shape, const Shape& dest_start, const Shape& extent, std::size_t element) {
  const std::size_t rank = extent.size();
  Shape offset(rank, 0);
  Shape s(rank), t(rank);
  for (std::int64_t i = 0, n = numel(extent); i < n; ++i) {
    for (std::size_t d = 0; d < rank; ++d) {
      s[d] = src_start[d] + offset[d];
      t[d] = dest_start[d] + offset[d];
    }
    std::memcpy(dest + linear_index(dest_shape, t) * element, src + linear_index(src_shape, s) * element,
                element);
    for (std::size_t d = rank; d-- > 0;) {
      if (++offset[d] < extent[d]) break;
      offset[d] = 0;
    }
  }
}

// Box::whole() as explicit start/size.
Box explicit_box(const Box& box, const Shape& shape) {
  if (box.start.empty() && box.size.empty()) return Box{Shape(shape.size(), 0), shape};
  return box;
}

std::map<std::string, GlobalTensor> by_name(const std::vector<GlobalTensor>& tensors) {
  std::map<std::string, GlobalTensor> out;
  for (const auto& t : tensors) out[t.name] = t;
  return out;
}

// Every element of the t-th global tensor is distinct: (t + 1) * 1000003 + i,
// little-endian, cut to the element size.
TensorBytes fill_globals(const std::vector<GlobalTensor>& tensors) {
  TensorBytes out;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::size_t element = dtype_size(tensors[t].dtype);
    Bytes& bytes = out[tensors[t].name];
    bytes.resize(static_cast<std::size_t>(numel(tensors[t].shape)) * element);
    for (std::int64_t i = 0; i < numel(tensors[t].shape); ++i) {
      const std::uint64_t value = (t + 1) * 1000003u + static_cast<std::uint64_t>(i);
      std::memcpy(bytes.data() + i * element, &value, element);
    }
  }
  return out;
}

// What engine rank g should hold: each piece copied from its global tensor.
TensorBytes expected_destinations(const std::vector<DestinationTensor>& tensors,
                                  const std::map<std::string, GlobalTensor>& globals,
                                  const TensorBytes& data) {
  TensorBytes out;
  for (const auto& dest : tensors) {
    const std::size_t element = dtype_size(dest.dtype);
    Bytes& bytes = out[dest.name];
    bytes.assign(static_cast<std::size_t>(numel(dest.shape)) * element, 0);
    for (const auto& piece : dest.pieces) {
      const GlobalTensor& global = globals.at(piece.tensor);
      const Box from = explicit_box(piece.from, global.shape);
      const Shape at = piece.at.empty() ? Shape(dest.shape.size(), 0) : piece.at;
      copy_box(data.at(piece.tensor).data(), global.shape, from.start, bytes.data(), dest.shape, at,
               from.size, element);
    }
  }
  return out;
}

// The trainer ranks: each rank's layout and its buffer (padding 0xEE).
struct TrainerRanks {
  std::vector<WeightLayout> layouts;
  std::vector<Bytes> buffers;
};

TrainerRanks build_trainer_ranks(const ShardedSource& source, const TensorBytes& data) {
  const auto globals = by_name(source.tensors);
  TrainerRanks ranks;
  for (std::size_t r = 0; r < source.ranks.size(); ++r) {
    auto layout = source.rank_layout(r);
    REQUIRE(layout.ok());
    Bytes buffer(layout->total_bytes(), 0xEE);
    for (std::size_t i = 0; i < source.ranks[r].size(); ++i) {
      const TrainerShard& shard = source.ranks[r][i];
      const GlobalTensor& global = globals.at(shard.tensor);
      const Box box = explicit_box(shard.box, global.shape);
      const TensorEntry& entry = layout->tensors()[i];
      REQUIRE(entry.spec.name == shard.local_name);
      REQUIRE(entry.spec.shape == box.size);
      copy_box(data.at(shard.tensor).data(), global.shape, box.start, buffer.data() + entry.offset, box.size,
               Shape(box.size.size(), 0), box.size, dtype_size(global.dtype));
    }
    ranks.layouts.push_back(std::move(layout).value());
    ranks.buffers.push_back(std::move(buffer));
  }
  return ranks;
}

// Runs engine rank g's reads by memcpy, checking that every read stays inside
// its source tensor and destination, that every destination byte is written
// exactly once, and that each list is sorted by (layout position, offset).
TensorBytes execute_plan(const RoutingPlan& plan, std::size_t g,
                         const std::vector<DestinationTensor>& tensors, const TrainerRanks& trainers) {
  TensorBytes out;
  std::map<std::string, std::vector<int>> writes;
  for (const auto& dest : tensors) {
    out[dest.name].assign(static_cast<std::size_t>(numel(dest.shape)) * dtype_size(dest.dtype), 0xCD);
    writes[dest.name].assign(out[dest.name].size(), 0);
  }
  bool in_bounds = true;
  bool sorted = true;
  for (std::size_t r = 0; r < plan.trainer_ranks(); ++r) {
    const WeightLayout& layout = trainers.layouts[r];
    std::pair<std::size_t, std::uint64_t> previous{0, 0};
    for (const PlannedRead& read : plan.reads(g, r)) {
      const TensorEntry* entry = layout.find(read.source);
      REQUIRE(entry != nullptr);
      REQUIRE(out.count(read.dest) == 1);
      const std::pair<std::size_t, std::uint64_t> key{static_cast<std::size_t>(entry - &layout.tensors()[0]),
                                                      read.offset};
      sorted = sorted && !(key < previous);
      previous = key;
      Bytes& dest = out[read.dest];
      const std::uint64_t dest_stride = read.dest_stride == 0 ? read.length : read.dest_stride;
      for (std::uint64_t i = 0; i < read.count; ++i) {
        const std::uint64_t from = read.offset + i * read.stride;
        const std::uint64_t to = read.dest_offset + i * dest_stride;
        if (read.length == 0 || from + read.length > entry->bytes || to + read.length > dest.size()) {
          in_bounds = false;
          continue;
        }
        std::memcpy(dest.data() + to, trainers.buffers[r].data() + entry->offset + from, read.length);
        for (std::uint64_t b = 0; b < read.length; ++b) ++writes[read.dest][to + b];
      }
    }
  }
  CHECK(in_bounds);
  CHECK(sorted);
  for (const auto& [name, counts] : writes) {
    INFO("destination tensor " << name);
    CHECK(std::all_of(counts.begin(), counts.end(), [](int n) { return n == 1; }));
  }
  return out;
}

std::uint64_t rank_bytes(const std::vector<DestinationTensor>& tensors) {
  std::uint64_t total = 0;
  for (const auto& dest : tensors)
    total += static_cast<std::uint64_t>(numel(dest.shape)) * dtype_size(dest.dtype);
  return total;
}

// Computes the plan, executes it for every engine rank, and compares the
// result with the destinations built straight from the global tensors.
RoutingPlan check_plan_delivers(const ShardedSource& source, const ShardedTarget& target) {
  auto plan = RoutingPlan::compute(source, target);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  REQUIRE(plan->trainer_ranks() == source.ranks.size());
  REQUIRE(plan->engine_ranks() == target.ranks.size());
  const TensorBytes data = fill_globals(source.tensors);
  const auto globals = by_name(source.tensors);
  const TrainerRanks trainers = build_trainer_ranks(source, data);
  for (std::size_t g = 0; g < target.ranks.size(); ++g) {
    INFO("engine rank " << g);
    const TensorBytes got = execute_plan(*plan, g, target.ranks[g], trainers);
    const TensorBytes want = expected_destinations(target.ranks[g], globals, data);
    for (const auto& [name, bytes] : want) {
      INFO("destination tensor " << name);
      CHECK(got.at(name) == bytes);
    }
    std::uint64_t planned = 0;
    for (std::size_t r = 0; r < plan->trainer_ranks(); ++r) planned += plan->bytes(g, r);
    CHECK(planned == rank_bytes(target.ranks[g]));
  }
  return std::move(plan).value();
}

// ---------------------------------------------------------------------------
// Building sources and targets.

GlobalTensor tensor(const std::string& name, Shape shape, DType dtype = DType::kInt32) {
  return GlobalTensor{name, dtype, std::move(shape)};
}

// Every tensor split along `dim` over `ranks` trainer ranks (FSDP dim-0 when
// dim is 0), under its global name.
ShardedSource split_source(const std::vector<GlobalTensor>& tensors, std::int64_t ranks,
                           std::size_t dim = 0) {
  ShardedSource source{tensors, {}};
  for (std::int64_t r = 0; r < ranks; ++r) {
    std::vector<TrainerShard> shards;
    for (const auto& t : tensors) shards.push_back({t.name, t.name, Box::split(t.shape, dim, ranks, r)});
    source.ranks.push_back(std::move(shards));
  }
  return source;
}

DestinationTensor whole_dest(const GlobalTensor& t) {
  return DestinationTensor{t.name, t.dtype, t.shape, {{t.name, Box::whole(), {}}}};
}

// Tensor-parallel slice `index` of `parts` along `dim`.
DestinationTensor split_dest(const GlobalTensor& t, std::size_t dim, std::int64_t parts, std::int64_t index) {
  Shape shape = t.shape;
  shape[dim] /= parts;
  return DestinationTensor{
      t.name, t.dtype, shape, {{t.name, Box::split(t.shape, dim, parts, index), Shape(shape.size(), 0)}}};
}

// A fused tensor (QKV, gate_up): the row slices `index` of `parts` of each
// part, stacked along dim 0.
DestinationTensor fused_rows(const std::string& name, const std::vector<GlobalTensor>& fused,
                             std::int64_t parts, std::int64_t index) {
  DestinationTensor dest{name, fused[0].dtype, {0, fused[0].shape[1]}, {}};
  for (const auto& t : fused) {
    dest.pieces.push_back({t.name, Box::split(t.shape, 0, parts, index), {dest.shape[0], 0}});
    dest.shape[0] += t.shape[0] / parts;
  }
  return dest;
}

std::size_t count_reads_of(const RoutingPlan& plan, std::size_t g, std::size_t r, const std::string& dest) {
  const auto& reads = plan.reads(g, r);
  return static_cast<std::size_t>(
      std::count_if(reads.begin(), reads.end(), [&](const PlannedRead& read) { return read.dest == dest; }));
}

std::vector<PlannedRead> reads_into(const RoutingPlan& plan, std::size_t g, const std::string& dest) {
  std::vector<PlannedRead> out;
  for (std::size_t r = 0; r < plan.trainer_ranks(); ++r) {
    for (const auto& read : plan.reads(g, r)) {
      if (read.dest == dest) out.push_back(read);
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Boxes and layouts.

TEST_CASE("sharding: Box::split, Box::whole and DestinationTensor::bytes", "[sharding]") {
  const Box whole = Box::whole();
  CHECK(whole.start.empty());
  CHECK(whole.size.empty());
  const Box rows = Box::split({12, 8}, 0, 3, 2);
  CHECK(rows.start == Shape{8, 0});
  CHECK(rows.size == Shape{4, 8});
  const Box cols = Box::split({12, 8}, 1, 4, 1);
  CHECK(cols.start == Shape{0, 2});
  CHECK(cols.size == Shape{12, 2});
  CHECK(DestinationTensor{"x", DType::kBFloat16, {3, 5}, {}}.bytes() == 30);
  CHECK(DestinationTensor{"x", DType::kInt64, {7}, {}}.bytes() == 56);
}

TEST_CASE("sharding: rank_layout lays out a rank's shards in order with their box shapes", "[sharding]") {
  ShardedSource source{
      {tensor("w", {8, 6}, DType::kBFloat16), tensor("norm", {6}, DType::kFloat32)},
      {{{"w", "layer.w", Box::split({8, 6}, 0, 2, 1)}, {"norm", "layer.norm", Box::whole()}}}};
  auto layout = source.rank_layout(0, 64);
  REQUIRE(layout.ok());
  REQUIRE(layout->tensors().size() == 2);
  CHECK(layout->tensors()[0].spec.name == "layer.w");
  CHECK(layout->tensors()[0].spec.dtype == DType::kBFloat16);
  CHECK(layout->tensors()[0].spec.shape == Shape{4, 6});
  CHECK(layout->tensors()[1].spec.name == "layer.norm");
  CHECK(layout->tensors()[1].spec.dtype == DType::kFloat32);
  CHECK(layout->tensors()[1].spec.shape == Shape{6});
  CHECK(layout->tensors()[1].offset == 64);
  CHECK(layout->alignment() == 64);

  auto missing = source.rank_layout(1);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == ErrorCode::kInvalidArgument);
  source.ranks[0][0].box = Box::split({8, 6}, 0, 5, 0);
  auto bad = source.rank_layout(0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("layer.w"));
}

// ---------------------------------------------------------------------------
// Plans executed by simulation.

TEST_CASE("sharding: dim-0 trainer shards to TP=2 with row and column splits", "[sharding]") {
  const std::vector<GlobalTensor> tensors = {
      tensor("embed", {32, 16}), tensor("q", {16, 16}),    tensor("o", {16, 16}, DType::kFloat32),
      tensor("up", {48, 16}),    tensor("down", {16, 48}), tensor("norm", {16}, DType::kFloat32)};
  const auto t = by_name(tensors);
  ShardedTarget target;
  for (std::int64_t g = 0; g < 2; ++g) {
    target.ranks.push_back({split_dest(t.at("embed"), 0, 2, g), split_dest(t.at("q"), 0, 2, g),
                            split_dest(t.at("o"), 1, 2, g), split_dest(t.at("up"), 0, 2, g),
                            split_dest(t.at("down"), 1, 2, g), whole_dest(t.at("norm"))});
  }
  const RoutingPlan plan = check_plan_delivers(split_source(tensors, 2), target);

  for (std::size_t g = 0; g < 2; ++g) {
    for (std::size_t r = 0; r < 2; ++r) {
      // A column slice of a row shard: one read of 8 rows of 8 columns.
      REQUIRE(count_reads_of(plan, g, r, "o") == 1);
      REQUIRE(count_reads_of(plan, g, r, "down") == 1);
      for (const auto& read : plan.reads(g, r)) {
        if (read.dest != "o") continue;
        CHECK(read.count == 8);
        CHECK(read.length == 8 * 4);
        CHECK(read.stride == 16 * 4);
        CHECK(read.dest_stride == 8 * 4);
        CHECK(read.offset == g * 8 * 4);
        CHECK(read.dest_offset == r * 8 * 8 * 4);
      }
    }
    // Row slices that match the trainer shards come whole from one rank.
    CHECK(count_reads_of(plan, g, g, "q") == 1);
    CHECK(count_reads_of(plan, g, 1 - g, "q") == 0);
  }
  CHECK(plan.read_count() == 2 * (1 + 1 + 2 + 1 + 2 + 2));
}

TEST_CASE("sharding: fused QKV and gate_up destinations from separate global tensors", "[sharding]") {
  const std::vector<GlobalTensor> tensors = {
      tensor("q", {16, 8}, DType::kBFloat16),  tensor("k", {8, 8}, DType::kBFloat16),
      tensor("v", {8, 8}, DType::kBFloat16),   tensor("gate", {24, 8}, DType::kBFloat16),
      tensor("up", {24, 8}, DType::kBFloat16), tensor("down", {8, 24}, DType::kBFloat16)};
  const auto t = by_name(tensors);
  ShardedTarget target;
  for (std::int64_t g = 0; g < 2; ++g) {
    target.ranks.push_back({fused_rows("qkv", {t.at("q"), t.at("k"), t.at("v")}, 2, g),
                            fused_rows("gate_up", {t.at("gate"), t.at("up")}, 2, g),
                            split_dest(t.at("down"), 1, 2, g)});
  }
  REQUIRE(target.ranks[0][0].shape == Shape{16, 8});
  const RoutingPlan plan = check_plan_delivers(split_source(tensors, 4), target);

  for (std::size_t g = 0; g < 2; ++g) {
    // Each piece spans two trainer shards: q, k, v x 2 reads, each contiguous.
    const auto qkv = reads_into(plan, g, "qkv");
    CHECK(qkv.size() == 6);
    for (const auto& read : qkv) CHECK(read.count == 1);
    CHECK(reads_into(plan, g, "gate_up").size() == 4);
    // k's rows land after q's in the fused tensor.
    for (std::size_t r = 0; r < 4; ++r) {
      for (const auto& read : plan.reads(g, r)) {
        if (read.source == "k") CHECK(read.dest_offset >= 8 * 8 * 2);
      }
    }
  }
}

TEST_CASE("sharding: FSDP 8 ranks to 4 engine ranks, a column split is one read per trainer shard",
          "[sharding]") {
  const std::vector<GlobalTensor> tensors = {tensor("o", {64, 32}), tensor("qkv", {96, 32}),
                                             tensor("norm", {32}, DType::kFloat32)};
  const auto t = by_name(tensors);
  ShardedTarget target;
  for (std::int64_t g = 0; g < 4; ++g) {
    target.ranks.push_back(
        {split_dest(t.at("o"), 1, 4, g), split_dest(t.at("qkv"), 0, 4, g), whole_dest(t.at("norm"))});
  }
  const RoutingPlan plan = check_plan_delivers(split_source(tensors, 8), target);

  for (std::size_t g = 0; g < 4; ++g) {
    for (std::size_t r = 0; r < 8; ++r) {
      INFO("engine rank " << g << ", trainer rank " << r);
      REQUIRE(count_reads_of(plan, g, r, "o") == 1);
      for (const auto& read : plan.reads(g, r)) {
        if (read.dest != "o") continue;
        CHECK(read.count == 8);  // the shard's rows
        CHECK(read.length == 8 * 4);
        CHECK(read.stride == 32 * 4);
        CHECK(read.dest_stride == 8 * 4);
      }
      // qkv rows [24g, 24g + 24) meet trainer shards of 12 rows: r = 2g, 2g + 1.
      CHECK(count_reads_of(plan, g, r, "qkv") == (r / 2 == g ? 1u : 0u));
      CHECK(count_reads_of(plan, g, r, "norm") == 1);
    }
  }
  CHECK(plan.read_count() == 4 * (8 + 2 + 8));
}

TEST_CASE("sharding: pipeline stages hold whole tensors of their layers", "[sharding]") {
  const std::vector<GlobalTensor> tensors = {tensor("embed", {16, 8}), tensor("l0.w", {8, 8}),
                                             tensor("l0.norm", {8}),   tensor("l1.w", {8, 8}),
                                             tensor("l1.norm", {8}),   tensor("head", {16, 8})};
  const auto t = by_name(tensors);
  ShardedSource source{tensors, {{}, {}}};
  for (const auto& name : {"embed", "l0.w", "l0.norm"})
    source.ranks[0].push_back({name, std::string("stage0.") + name, {}});
  for (const auto& name : {"l1.w", "l1.norm", "head"})
    source.ranks[1].push_back({name, std::string("stage1.") + name, {}});
  ShardedTarget target;
  for (std::int64_t g = 0; g < 2; ++g) {
    target.ranks.push_back({split_dest(t.at("embed"), 0, 2, g), split_dest(t.at("l0.w"), 1, 2, g),
                            whole_dest(t.at("l0.norm")), split_dest(t.at("l1.w"), 0, 2, g),
                            whole_dest(t.at("l1.norm")), split_dest(t.at("head"), 0, 2, g)});
  }
  const RoutingPlan plan = check_plan_delivers(source, target);

  for (std::size_t g = 0; g < 2; ++g) {
    for (const auto& read : plan.reads(g, 0)) CHECK(read.source.rfind("stage0.", 0) == 0);
    for (const auto& read : plan.reads(g, 1)) CHECK(read.source.rfind("stage1.", 0) == 0);
    CHECK(plan.reads(g, 0).size() == 3);
    CHECK(plan.reads(g, 1).size() == 3);
  }
}

TEST_CASE("sharding: replicas are read round-robin by engine rank", "[sharding]") {
  const std::vector<GlobalTensor> tensors = {tensor("norm", {16}, DType::kFloat32), tensor("w", {16, 8})};
  const auto t = by_name(tensors);
  ShardedSource source{tensors, {}};
  for (std::int64_t r = 0; r < 4; ++r) {
    source.ranks.push_back({{"w", "w", Box::split({16, 8}, 0, 4, r)}, {"norm", "norm", Box::whole()}});
  }
  for (std::int64_t engine_ranks : {4, 6}) {
    INFO(engine_ranks << " engine ranks");
    ShardedTarget target;
    for (std::int64_t g = 0; g < engine_ranks; ++g) {
      target.ranks.push_back({whole_dest(t.at("norm")), split_dest(t.at("w"), 1, 2, g % 2)});
    }
    const RoutingPlan plan = check_plan_delivers(source, target);
    for (std::size_t g = 0; g < static_cast<std::size_t>(engine_ranks); ++g) {
      for (std::size_t r = 0; r < 4; ++r) {
        CHECK(count_reads_of(plan, g, r, "norm") == (r == g % 4 ? 1u : 0u));
        CHECK(count_reads_of(plan, g, r, "w") == 1);
      }
    }
  }
}

TEST_CASE("sharding: a 3-D tensor split along dim 1", "[sharding]") {
  const std::vector<GlobalTensor> tensors = {tensor("experts", {4, 8, 6}, DType::kInt64)};
  ShardedTarget target;
  for (std::int64_t g = 0; g < 2; ++g) target.ranks.push_back({split_dest(tensors[0], 1, 2, g)});

  SECTION("trainer shards along dim 0: one read of 2 blocks per shard") {
    const RoutingPlan plan = check_plan_delivers(split_source(tensors, 2, 0), target);
    for (std::size_t g = 0; g < 2; ++g) {
      for (std::size_t r = 0; r < 2; ++r) {
        REQUIRE(plan.reads(g, r).size() == 1);
        const PlannedRead& read = plan.reads(g, r)[0];
        CHECK(read.count == 2);
        CHECK(read.length == 4 * 6 * 8);
        CHECK(read.stride == 8 * 6 * 8);
        CHECK(read.dest_stride == 4 * 6 * 8);
      }
    }
  }
  SECTION("trainer shards along dim 2: one strided read per outer index") {
    const RoutingPlan plan = check_plan_delivers(split_source(tensors, 2, 2), target);
    for (std::size_t g = 0; g < 2; ++g) {
      for (std::size_t r = 0; r < 2; ++r) {
        REQUIRE(plan.reads(g, r).size() == 4);
        for (const auto& read : plan.reads(g, r)) {
          CHECK(read.count == 4);
          CHECK(read.length == 3 * 8);
        }
      }
    }
  }
  SECTION("trainer shards along dim 1 matching the engine: one contiguous read") {
    const RoutingPlan plan = check_plan_delivers(split_source(tensors, 2, 1), target);
    for (std::size_t g = 0; g < 2; ++g) {
      CHECK(plan.reads(g, 1 - g).empty());
      REQUIRE(plan.reads(g, g).size() == 1);
      CHECK(plan.reads(g, g)[0].count == 1);
      CHECK(plan.reads(g, g)[0].length == 4 * 4 * 6 * 8);
    }
  }
}

TEST_CASE("sharding: pieces in another order than their rows, uneven shards and a scalar", "[sharding]") {
  // w's column halves stacked the other way round, from trainer shards of
  // unequal boxes (rows 0..3 whole; rows 3..10 split by columns), and a 0-d
  // tensor.
  const std::vector<GlobalTensor> tensors = {tensor("w", {10, 6}, DType::kInt16),
                                             tensor("s", {}, DType::kFloat64)};
  const ShardedSource source{tensors,
                             {{{"w", "a", Box{{0, 0}, {3, 6}}}, {"s", "s", {}}},
                              {{"w", "b", Box{{3, 0}, {7, 3}}}},
                              {{"w", "c", Box{{3, 3}, {7, 3}}}}}};
  const DestinationTensor stacked{
      "stacked",
      DType::kInt16,
      {20, 3},
      {{"w", Box{{0, 0}, {10, 3}}, {10, 0}}, {"w", Box{{0, 3}, {10, 3}}, {0, 0}}}};
  const DestinationTensor scalar{"scalar", DType::kFloat64, {}, {{"s", Box::whole(), {}}}};
  const RoutingPlan plan = check_plan_delivers(source, ShardedTarget{{{stacked, scalar}}});
  // Each piece: a strided read of 3 rows from "a" and one contiguous read of
  // its 7 rows from "b" or "c"; the scalar: one read of 8 bytes.
  CHECK(plan.reads(0, 0).size() == 3);
  CHECK(plan.reads(0, 1).size() == 1);
  CHECK(plan.reads(0, 2).size() == 1);
  CHECK(plan.reads(0, 1)[0].length == 7 * 3 * 2);
  CHECK(plan.reads(0, 1)[0].dest_offset == 13 * 3 * 2);  // rows 3.. of piece 0, placed at row 10
}

TEST_CASE("sharding: reads are sorted by the source's layout position, then offset", "[sharding]") {
  // The engine lists its tensors, and the fused tensor its pieces, in the
  // opposite order of the trainer layouts.
  const std::vector<GlobalTensor> tensors = {tensor("q", {8, 4}), tensor("k", {8, 4}), tensor("v", {8, 4}),
                                             tensor("o", {4, 8})};
  const auto t = by_name(tensors);
  ShardedTarget target;
  for (std::int64_t g = 0; g < 2; ++g) {
    target.ranks.push_back(
        {split_dest(t.at("o"), 1, 2, g), fused_rows("vkq", {t.at("v"), t.at("k"), t.at("q")}, 2, g)});
  }
  const RoutingPlan plan = check_plan_delivers(split_source(tensors, 2), target);
  for (std::size_t g = 0; g < 2; ++g) {
    for (std::size_t r = 0; r < 2; ++r) {
      std::vector<std::string> sources;
      for (const auto& read : plan.reads(g, r)) sources.push_back(read.source);
      // Rows [4g, 4g + 4) of q, k and v are trainer rank g's; o is split by columns.
      const std::vector<std::string> expected =
          r == g ? std::vector<std::string>{"q", "k", "v", "o"} : std::vector<std::string>{"o"};
      CHECK(sources == expected);
    }
  }
}

// ---------------------------------------------------------------------------
// bind().

TEST_CASE("sharding: bind gives one Destination of slices per trainer rank", "[sharding]") {
  const std::vector<GlobalTensor> tensors = {tensor("w", {8, 8}), tensor("b", {8})};
  const auto t = by_name(tensors);
  ShardedTarget target{
      {{split_dest(t.at("w"), 1, 2, 0), whole_dest(t.at("b"))}, {split_dest(t.at("w"), 1, 2, 1)}}};
  ShardedSource source = split_source(tensors, 2);
  source.ranks.push_back({});  // a trainer rank holding nothing
  auto plan = RoutingPlan::compute(source, target);
  REQUIRE(plan.ok());

  std::vector<std::uint8_t> w(8 * 4 * 4), b(8 * 4);
  std::unordered_map<std::string, void*> buffers{{"w", w.data()}, {"b", b.data()}};
  auto bound = plan->bind(0, buffers, MemoryKind::kHost);
  REQUIRE(bound.ok());
  REQUIRE(bound->size() == 3);
  for (std::size_t r = 0; r < 2; ++r) {
    const auto& slices = (*bound)[r].tensor_slices();
    const auto& reads = plan->reads(0, r);
    REQUIRE(slices.size() == reads.size());
    REQUIRE(slices.size() == 2);
    for (std::size_t i = 0; i < slices.size(); ++i) {
      CHECK(slices[i].tensor == reads[i].source);
      CHECK(slices[i].offset == reads[i].offset);
      CHECK(slices[i].length == reads[i].length);
      CHECK(slices[i].count == reads[i].count);
      CHECK(slices[i].stride == reads[i].stride);
      CHECK(slices[i].dest_stride == reads[i].dest_stride);
      const void* want = (reads[i].dest == "w" ? w.data() : b.data()) + reads[i].dest_offset;
      CHECK(static_cast<const void*>(slices[i].dest) == want);
    }
  }
  CHECK((*bound)[2].tensor_slices().empty());

  auto missing = plan->bind(0, {{"w", w.data()}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(missing.status().message(), Catch::Contains("'b'"));
  auto null = plan->bind(0, {{"w", w.data()}, {"b", nullptr}});
  REQUIRE_FALSE(null.ok());
  CHECK(null.status().code() == ErrorCode::kInvalidArgument);
  auto no_rank = plan->bind(2, buffers);
  REQUIRE_FALSE(no_rank.ok());
  CHECK(no_rank.status().code() == ErrorCode::kInvalidArgument);
  // Engine rank 1 has no "b": a map without it is enough.
  CHECK(plan->bind(1, {{"w", w.data()}}).ok());
}

// ---------------------------------------------------------------------------
// Errors.

namespace {

// A valid starting point: w [8, 8] and norm [8] over 2 dim-0 trainer ranks,
// engine TP=2 with w column-split.
struct Setup {
  ShardedSource source = split_source({tensor("w", {8, 8}), tensor("norm", {8}, DType::kFloat32)}, 2);
  ShardedTarget target{
      {{split_dest(tensor("w", {8, 8}), 1, 2, 0), whole_dest(tensor("norm", {8}, DType::kFloat32))},
       {split_dest(tensor("w", {8, 8}), 1, 2, 1)}}};
};

void require_refused(const Setup& setup, const std::vector<std::string>& phrases) {
  auto plan = RoutingPlan::compute(setup.source, setup.target);
  REQUIRE_FALSE(plan.ok());
  INFO(plan.status().message());
  CHECK(plan.status().code() == ErrorCode::kInvalidArgument);
  for (const auto& phrase : phrases) CHECK_THAT(plan.status().message(), Catch::Contains(phrase));
}

}  // namespace

TEST_CASE("sharding: the starting point of the error cases is valid", "[sharding]") {
  Setup setup;
  check_plan_delivers(setup.source, setup.target);
}

TEST_CASE("sharding: compute refuses a dtype mismatch", "[sharding]") {
  Setup setup;
  setup.target.ranks[0][1].dtype = DType::kBFloat16;
  require_refused(setup, {"'norm'", "bfloat16", "float32", "never converts"});
}

TEST_CASE("sharding: compute refuses a destination not covered by its pieces", "[sharding]") {
  Setup setup;
  setup.target.ranks[1][0].shape = {8, 5};
  require_refused(setup, {"'w'", "engine rank 1", "not covered", "32 of its 40"});
}

TEST_CASE("sharding: compute refuses overlapping pieces", "[sharding]") {
  Setup setup;
  DestinationTensor& w = setup.target.ranks[0][0];
  w.pieces = {{"w", Box{{0, 0}, {5, 4}}, {0, 0}}, {"w", Box{{4, 0}, {4, 4}}, {3, 0}}};
  w.shape = {8, 4};  // rows 0..5 and 3..7: rows 3 and 4 twice
  require_refused(setup, {"'w'", "overlap"});
}

TEST_CASE("sharding: compute refuses a piece outside its tensors", "[sharding]") {
  SECTION("outside the destination tensor") {
    Setup setup;
    setup.target.ranks[0][0].pieces[0].at = {0, 1};
    require_refused(setup, {"'w'", "outside the destination"});
  }
  SECTION("outside the global tensor") {
    Setup setup;
    setup.target.ranks[0][0].pieces[0].from = Box{{0, 6}, {8, 4}};
    require_refused(setup, {"'w'", "outside the tensor"});
  }
  SECTION("with the wrong rank") {
    Setup setup;
    setup.target.ranks[0][1].shape = {2, 4};
    require_refused(setup, {"'norm'", "dimensions"});
  }
}

TEST_CASE("sharding: compute refuses a piece part of which no trainer rank holds", "[sharding]") {
  Setup setup;
  setup.source.ranks[1].erase(setup.source.ranks[1].begin());  // rows 4..8 of w
  require_refused(setup, {"'w'", "held by no trainer rank", "16 elements"});
}

TEST_CASE("sharding: compute refuses trainer shards that overlap without being equal", "[sharding]") {
  Setup setup;
  setup.source.ranks[1][0].box = Box{{3, 0}, {5, 8}};
  require_refused(setup, {"'w'", "overlaps", "replicas"});
}

TEST_CASE("sharding: compute refuses a Box::split with a non-divisible size", "[sharding]") {
  SECTION("a trainer shard") {
    Setup setup;
    setup.source.ranks[0][0].box = Box::split({8, 8}, 0, 3, 0);
    require_refused(setup, {"'w'", "empty box", "Box::split"});
  }
  SECTION("a destination piece") {
    Setup setup;
    setup.target.ranks[0][0].pieces[0].from = Box::split({8, 8}, 1, 3, 0);
    require_refused(setup, {"'w'", "empty box", "Box::split"});
  }
}

TEST_CASE("sharding: compute refuses unknown global tensors", "[sharding]") {
  SECTION("in a trainer shard") {
    Setup setup;
    setup.source.ranks[0].push_back({"bias", "bias", {}});
    require_refused(setup, {"'bias'", "unknown global tensor"});
  }
  SECTION("in a destination piece") {
    Setup setup;
    setup.target.ranks[1].push_back(whole_dest(tensor("bias", {8})));
    require_refused(setup, {"'bias'", "unknown global tensor"});
  }
}

TEST_CASE("sharding: compute refuses duplicate names", "[sharding]") {
  SECTION("two destination tensors of one engine rank") {
    Setup setup;
    setup.target.ranks[1].push_back(setup.target.ranks[1][0]);
    require_refused(setup, {"'w'", "listed twice"});
  }
  SECTION("two shards of one trainer rank") {
    Setup setup;
    setup.source.ranks[0][1].local_name = "w";
    require_refused(setup, {"'w'", "local name"});
  }
}

// ---------------------------------------------------------------------------
// Plan time.

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WS_ROUTING_TEST_SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define WS_ROUTING_TEST_SLOW_BUILD 1
#endif
#endif
#if !defined(NDEBUG)
#define WS_ROUTING_TEST_SLOW_BUILD 1
#endif

namespace {

// Reads one piece of rows [start, start + rows) makes over dim-0 shards of
// `shard_rows` rows: one per shard it meets.
std::size_t row_shards_met(std::int64_t start, std::int64_t rows, std::int64_t shard_rows) {
  return static_cast<std::size_t>((start + rows - 1) / shard_rows - start / shard_rows + 1);
}

}  // namespace

TEST_CASE("sharding: a plan of 1000 tensors over 8 trainer x 4 engine ranks takes under 30 ms",
          "[sharding]") {
  constexpr std::int64_t kTrainerRanks = 8, kTp = 4, kLayers = 111;
  constexpr std::int64_t kHidden = 512, kKv = 128, kFfn = 1376, kVocab = 32000;
  std::vector<GlobalTensor> tensors = {tensor("embed", {kVocab, kHidden}, DType::kBFloat16)};
  for (std::int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto [name, shape] :
         std::vector<std::pair<std::string, Shape>>{{"self_attn.q_proj.weight", {kHidden, kHidden}},
                                                    {"self_attn.k_proj.weight", {kKv, kHidden}},
                                                    {"self_attn.v_proj.weight", {kKv, kHidden}},
                                                    {"self_attn.o_proj.weight", {kHidden, kHidden}},
                                                    {"mlp.gate_proj.weight", {kFfn, kHidden}},
                                                    {"mlp.up_proj.weight", {kFfn, kHidden}},
                                                    {"mlp.down_proj.weight", {kHidden, kFfn}},
                                                    {"input_layernorm.weight", {kHidden}},
                                                    {"post_attention_layernorm.weight", {kHidden}}}) {
      tensors.push_back(tensor(p + name, shape, DType::kBFloat16));
    }
  }
  REQUIRE(tensors.size() == 1000);
  const auto t = by_name(tensors);
  const ShardedSource source = split_source(tensors, kTrainerRanks);

  // Engine TP=4: fused QKV and gate_up (row-split, column-parallel), o_proj
  // and down_proj column-split (row-parallel), norms replicated.
  ShardedTarget target;
  std::size_t expected_reads = 0;
  const auto rows_read = [&](std::int64_t rows, std::int64_t g) {
    return row_shards_met(g * rows / kTp, rows / kTp, rows / kTrainerRanks);
  };
  for (std::int64_t g = 0; g < kTp; ++g) {
    std::vector<DestinationTensor> rank = {split_dest(t.at("embed"), 0, kTp, g)};
    expected_reads += rows_read(kVocab, g);
    for (std::int64_t l = 0; l < kLayers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      rank.push_back(fused_rows(p + "self_attn.qkv_proj.weight",
                                {t.at(p + "self_attn.q_proj.weight"), t.at(p + "self_attn.k_proj.weight"),
                                 t.at(p + "self_attn.v_proj.weight")},
                                kTp, g));
      rank.push_back(split_dest(t.at(p + "self_attn.o_proj.weight"), 1, kTp, g));
      rank.push_back(fused_rows(p + "mlp.gate_up_proj.weight",
                                {t.at(p + "mlp.gate_proj.weight"), t.at(p + "mlp.up_proj.weight")}, kTp, g));
      rank.push_back(split_dest(t.at(p + "mlp.down_proj.weight"), 1, kTp, g));
      rank.push_back(whole_dest(t.at(p + "input_layernorm.weight")));
      rank.push_back(whole_dest(t.at(p + "post_attention_layernorm.weight")));
      expected_reads += rows_read(kHidden, g) + 2 * rows_read(kKv, g);  // qkv
      expected_reads += kTrainerRanks;                                  // o_proj: one per trainer shard
      expected_reads += 2 * rows_read(kFfn, g);                         // gate_up
      expected_reads += kTrainerRanks;                                  // down_proj
      expected_reads += 2 * kTrainerRanks;                              // the norms, from 8 dim-0 shards
    }
    target.ranks.push_back(std::move(rank));
  }

#ifdef WS_ROUTING_TEST_SLOW_BUILD
  const double bound = 200.0;
  const char* build = " (sanitizer or debug build: bound relaxed to 200 ms)";
#else
  // About 10 ms on an idle 2-vCPU VM (7.7-15 ms on the Intel one); 21.9 ms
  // there with the rest of the suite on the other core. 30 ms still fails a
  // plan that does more than a few times the work it needs.
  const double bound = 30.0;
  const char* build = "";
#endif
  // The median of 5 runs; on a shared machine a round can be slowed by other
  // processes, so up to 3 rounds are measured and the first under the bound
  // (or the best) counts.
  double median = 0.0;
  std::size_t reads = 0;
  bool column_splits_are_single_reads = true;
  for (int round = 0; round < 3 && (round == 0 || median >= bound); ++round) {
    std::vector<double> ms;
    for (int run = 0; run < 5; ++run) {
      const auto start = std::chrono::steady_clock::now();
      auto plan = RoutingPlan::compute(source, target);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      REQUIRE(plan.ok());
      reads = plan->read_count();
      for (std::int64_t g = 0; g < kTp; ++g) {
        for (std::int64_t r = 0; r < kTrainerRanks; ++r) {
          for (const auto& read : plan->reads(g, r)) {
            const bool column_split = read.dest.find("o_proj") != std::string::npos ||
                                      read.dest.find("down_proj") != std::string::npos;
            if (column_split && read.count != kHidden / kTrainerRanks) column_splits_are_single_reads = false;
          }
        }
      }
    }
    std::sort(ms.begin(), ms.end());
    median = round == 0 ? ms[2] : std::min(median, ms[2]);
  }
  CHECK(reads == expected_reads);
  CHECK(column_splits_are_single_reads);
  std::printf(
      "routing plan: 1000 tensors, 8 trainer ranks x 4 engine ranks: %zu reads, median %.2f ms over 5 "
      "runs%s\n",
      reads, median, build);
  CHECK(median < bound);
}
