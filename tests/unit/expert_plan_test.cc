// RoutingPlan with expert lists (MoE): plans executed by simulation (memcpy
// from trainer rank buffers laid out by rank_layout into engine rank
// buffers) and every destination element compared with the value its global
// coordinates say it must have; each engine rank's bytes equal exactly its
// experts' bytes; read shapes (one strided read per run of experts, not per
// expert or row); re-planning for a new expert map; the refusals; and (hidden,
// [moe-replan-perf]) the time to re-plan 256 experts x 60 layers over 8
// trainer and 16 engine ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "weightsync/sharding.h"

using namespace weightsync;

namespace {

using Shape = std::vector<std::int64_t>;
using Bytes = std::vector<std::uint8_t>;
using Experts = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// The value of element `index` (global coordinates) of global tensor number
// `tensor`: distinct over all tensors and elements of a test.
std::int32_t value_at(std::size_t tensor, const Shape& shape, const Shape& index) {
  std::int64_t linear = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + index[d];
  return static_cast<std::int32_t>((tensor + 1) * 10000019 + linear);
}

// Calls f(local index) for every index of a tensor of `shape`.
template <typename F>
void for_each_index(const Shape& shape, F&& f) {
  Shape index(shape.size(), 0);
  for (std::int64_t i = 0, n = numel(shape); i < n; ++i) {
    f(index);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// Global coordinates of local element `local` of a box (with an expert list:
// local index i along expert_dim is expert experts[i]).
Shape to_global(const Box& box, const Experts& experts, std::size_t expert_dim, const Shape& local) {
  Shape global(local.size());
  for (std::size_t d = 0; d < local.size(); ++d) {
    const std::int64_t start = box.start.empty() ? 0 : box.start[d];
    global[d] = (!experts.empty() && d == expert_dim) ? experts[local[d]] : start + local[d];
  }
  return global;
}

Shape box_shape(const Box& box, const Shape& shape, const Experts& experts, std::size_t expert_dim) {
  Shape out = box.size.empty() ? shape : box.size;
  if (!experts.empty()) out[expert_dim] = static_cast<std::int64_t>(experts.size());
  return out;
}

std::size_t tensor_number(const ShardedSource& source, const std::string& name) {
  for (std::size_t t = 0; t < source.tensors.size(); ++t) {
    if (source.tensors[t].name == name) return t;
  }
  FAIL("no global tensor " << name);
  return 0;
}

// Each trainer rank's layout and buffer, every element its global value.
struct TrainerRanks {
  std::vector<WeightLayout> layouts;
  std::vector<Bytes> buffers;
};

TrainerRanks build_trainer_ranks(const ShardedSource& source) {
  TrainerRanks ranks;
  for (std::size_t r = 0; r < source.ranks.size(); ++r) {
    auto layout = source.rank_layout(r);
    INFO(layout.status().to_string());
    REQUIRE(layout.ok());
    Bytes buffer(layout->total_bytes(), 0xEE);
    for (std::size_t i = 0; i < source.ranks[r].size(); ++i) {
      const TrainerShard& shard = source.ranks[r][i];
      const std::size_t t = tensor_number(source, shard.tensor);
      const Shape& global_shape = source.tensors[t].shape;
      const TensorEntry& entry = layout->tensors()[i];
      const Shape local_shape = box_shape(shard.box, global_shape, shard.experts, shard.expert_dim);
      REQUIRE(entry.spec.shape == local_shape);
      std::int32_t* out = reinterpret_cast<std::int32_t*>(buffer.data() + entry.offset);
      std::int64_t k = 0;
      for_each_index(local_shape, [&](const Shape& local) {
        out[k++] = value_at(t, global_shape, to_global(shard.box, shard.experts, shard.expert_dim, local));
      });
    }
    ranks.layouts.push_back(std::move(layout).value());
    ranks.buffers.push_back(std::move(buffer));
  }
  return ranks;
}

// Engine rank g's tensors after running its reads by memcpy; counts bytes
// written more than once or out of bounds.
std::map<std::string, Bytes> execute(const RoutingPlan& plan, std::size_t g,
                                     const std::vector<DestinationTensor>& tensors,
                                     const TrainerRanks& trainers) {
  std::map<std::string, Bytes> out;
  std::map<std::string, std::vector<int>> writes;
  for (const auto& dest : tensors) {
    out[dest.name].assign(dest.bytes(), 0xCD);
    writes[dest.name].assign(dest.bytes(), 0);
  }
  for (std::size_t r = 0; r < plan.trainer_ranks(); ++r) {
    for (const PlannedRead& read : plan.reads(g, r)) {
      const TensorEntry* entry = trainers.layouts[r].find(read.source);
      REQUIRE(entry != nullptr);
      Bytes& dest = out.at(read.dest);
      const std::uint64_t dest_stride = read.dest_stride == 0 ? read.length : read.dest_stride;
      for (std::uint64_t i = 0; i < read.count; ++i) {
        const std::uint64_t from = read.offset + i * read.stride, to = read.dest_offset + i * dest_stride;
        REQUIRE(from + read.length <= entry->bytes);
        REQUIRE(to + read.length <= dest.size());
        std::memcpy(dest.data() + to, trainers.buffers[r].data() + entry->offset + from, read.length);
        for (std::uint64_t b = 0; b < read.length; ++b) ++writes[read.dest][to + b];
      }
    }
  }
  for (const auto& [name, counts] : writes) {
    INFO("destination tensor " << name);
    CHECK(std::all_of(counts.begin(), counts.end(), [](int n) { return n == 1; }));
  }
  return out;
}

// Checks every element of every engine rank's tensors against the value of
// the global element its pieces place there, and that each engine rank reads
// exactly its tensors' bytes.
void check_every_element(const ShardedSource& source, const ShardedTarget& target, const RoutingPlan& plan) {
  const TrainerRanks trainers = build_trainer_ranks(source);
  for (std::size_t g = 0; g < target.ranks.size(); ++g) {
    INFO("engine rank " << g);
    const auto got = execute(plan, g, target.ranks[g], trainers);
    std::uint64_t want_bytes = 0;
    for (const DestinationTensor& dest : target.ranks[g]) {
      INFO("destination tensor " << dest.name);
      want_bytes += dest.bytes();
      std::vector<std::int32_t> want(static_cast<std::size_t>(numel(dest.shape)), 0);
      for (const DestinationPiece& piece : dest.pieces) {
        const std::size_t t = tensor_number(source, piece.tensor);
        const Shape& global_shape = source.tensors[t].shape;
        const Shape shape = box_shape(piece.from, global_shape, piece.experts, piece.expert_dim);
        for_each_index(shape, [&](const Shape& local) {
          std::int64_t linear = 0;
          for (std::size_t d = 0; d < shape.size(); ++d)
            linear = linear * dest.shape[d] + piece.at[d] + local[d];
          want[static_cast<std::size_t>(linear)] =
              value_at(t, global_shape, to_global(piece.from, piece.experts, piece.expert_dim, local));
        });
      }
      const Bytes& bytes = got.at(dest.name);
      REQUIRE(bytes.size() == want.size() * sizeof(std::int32_t));
      CHECK(std::memcmp(bytes.data(), want.data(), bytes.size()) == 0);
    }
    std::uint64_t planned = 0;
    for (std::size_t r = 0; r < plan.trainer_ranks(); ++r) planned += plan.bytes(g, r);
    CHECK(planned == want_bytes);
  }
}

// ---------------------------------------------------------------------------
// A toy MoE: `layers` layers of w1, w3 [E, ff, d] and w2 [E, d, ff].

struct Moe {
  std::int64_t experts = 16, layers = 2, ff = 8, d = 4;
  DType dtype = DType::kInt32;

  std::string name(std::int64_t layer, const char* w) const {
    return "layers." + std::to_string(layer) + ".experts." + w;
  }
  Shape shape(const char* w) const {
    return std::string(w) == "w2" ? Shape{experts, d, ff} : Shape{experts, ff, d};
  }
  std::vector<GlobalTensor> globals() const {
    std::vector<GlobalTensor> out;
    for (std::int64_t l = 0; l < layers; ++l) {
      for (const char* w : {"w1", "w2", "w3"}) out.push_back({name(l, w), dtype, shape(w)});
    }
    return out;
  }
  // Trainer: EP over `ep.ranks.size()` groups of `tp` ranks each (rank = e *
  // tp + t); tensor parallelism splits w1 and w3 along ff (dim 1) and w2
  // along ff (dim 2).
  ShardedSource source(const ExpertMap& ep, std::int64_t tp) const {
    ShardedSource out{globals(), {}};
    for (std::size_t e = 0; e < ep.ranks.size(); ++e) {
      for (std::int64_t t = 0; t < tp; ++t) {
        std::vector<TrainerShard> shards;
        for (std::int64_t l = 0; l < layers; ++l) {
          for (const char* w : {"w1", "w2", "w3"}) {
            const std::size_t dim = std::string(w) == "w2" ? 2 : 1;
            shards.push_back({name(l, w), name(l, w), Box::split(shape(w), dim, tp, t), ep.ranks[e], 0});
          }
        }
        out.ranks.push_back(std::move(shards));
      }
    }
    return out;
  }
  // Engine: each rank holds its experts of `map` whole: a fused w13
  // [local, 2 ff, d] (gate then up) and w2 [local, d, ff].
  ShardedTarget target(const ExpertMap& map) const {
    ShardedTarget out;
    for (const Experts& local : map.ranks) {
      const auto n = static_cast<std::int64_t>(local.size());
      std::vector<DestinationTensor> tensors;
      for (std::int64_t l = 0; l < layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        tensors.push_back({p + "w13",
                           dtype,
                           {n, 2 * ff, d},
                           {{name(l, "w1"), Box::whole(), {0, 0, 0}, local, 0},
                            {name(l, "w3"), Box::whole(), {0, ff, 0}, local, 0}}});
        tensors.push_back(
            {p + "w2", dtype, {n, d, ff}, {{name(l, "w2"), Box::whole(), {0, 0, 0}, local, 0}}});
      }
      out.ranks.push_back(std::move(tensors));
    }
    return out;
  }
  std::uint64_t expert_bytes() const { return 3 * static_cast<std::uint64_t>(ff * d) * dtype_size(dtype); }
};

ExpertMap shuffled_map(std::int64_t experts, std::size_t ranks, std::uint32_t seed) {
  Experts ids(static_cast<std::size_t>(experts));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ExpertMap map{experts, std::vector<Experts>(ranks)};
  for (std::size_t i = 0; i < ids.size(); ++i) map.ranks[i % ranks].push_back(ids[i]);
  return map;
}

RoutingPlan compute(const ShardedSource& source, const ShardedTarget& target) {
  auto plan = RoutingPlan::compute(source, target);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

std::size_t reads_into(const RoutingPlan& plan, std::size_t g, const std::string& dest) {
  std::size_t n = 0;
  for (std::size_t r = 0; r < plan.trainer_ranks(); ++r) {
    for (const auto& read : plan.reads(g, r)) n += read.dest == dest ? 1 : 0;
  }
  return n;
}

}  // namespace

TEST_CASE("experts: ExpertMap::contiguous and rank_layout of an expert shard", "[sharding][experts]") {
  const ExpertMap map = ExpertMap::contiguous(8, 4);
  CHECK(map.experts == 8);
  CHECK(map.ranks == std::vector<Experts>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(ExpertMap::contiguous(8, 3).ranks == std::vector<Experts>{{0, 1, 2}, {3, 4, 5}, {6, 7}});
  CHECK(ExpertMap::contiguous(2, 3).ranks == std::vector<Experts>{{0}, {1}, {}});
  Moe moe;
  const ShardedSource source = moe.source(ExpertMap{16, {{5, 1, 9}}}, 2);
  auto layout = source.rank_layout(1);
  REQUIRE(layout.ok());
  CHECK(layout->find("layers.0.experts.w1")->spec.shape == Shape{3, 4, 4});  // 3 experts, ff / 2, d
  CHECK(layout->find("layers.1.experts.w2")->spec.shape == Shape{3, 4, 4});  // 3 experts, d, ff / 2
}

TEST_CASE("experts: EP x TP trainer ranks to engine ranks of a shuffled expert map, every element",
          "[sharding][experts]") {
  Moe moe;
  const ExpertMap trainer = ExpertMap::contiguous(moe.experts, 2);
  const std::int64_t tp = GENERATE(1, 2);
  INFO("trainer TP " << tp);
  const ShardedSource source = moe.source(trainer, tp);
  const ExpertMap engine = shuffled_map(moe.experts, 4, 7);
  const ShardedTarget target = moe.target(engine);
  const RoutingPlan plan = compute(source, target);
  check_every_element(source, target, plan);
  for (std::size_t g = 0; g < 4; ++g) {
    std::uint64_t bytes = 0;
    for (std::size_t r = 0; r < plan.trainer_ranks(); ++r) {
      bytes += plan.bytes(g, r);
      // Only the trainer ranks that hold one of g's experts are read.
      const Experts& held = trainer.ranks[r / static_cast<std::size_t>(tp)];
      const bool holds_one = std::any_of(engine.ranks[g].begin(), engine.ranks[g].end(), [&](std::int64_t e) {
        return std::find(held.begin(), held.end(), e) != held.end();
      });
      CHECK((plan.bytes(g, r) > 0) == holds_one);
    }
    // Exactly its experts' bytes: 4 experts x (w1, w2, w3) x layers.
    CHECK(bytes == engine.ranks[g].size() * moe.expert_bytes() * static_cast<std::uint64_t>(moe.layers));
  }
}

TEST_CASE("experts: trainer ranks holding scattered experts in their own order", "[sharding][experts]") {
  Moe moe;
  // Rank 0 holds the even experts backwards, rank 1 the odd ones in a shuffled order.
  ExpertMap trainer{moe.experts, {{14, 12, 10, 8, 6, 4, 2, 0}, {3, 1, 15, 5, 7, 13, 9, 11}}};
  const ShardedSource source = moe.source(trainer, 2);
  for (std::uint32_t seed : {1u, 2u}) {
    const ShardedTarget target = moe.target(shuffled_map(moe.experts, 4, seed));
    check_every_element(source, target, compute(source, target));
  }
}

TEST_CASE("experts: an expert dimension that is not the outermost", "[sharding][experts]") {
  // [layers, experts, rows]: the experts along dim 1, scattered on 2 trainer ranks,
  // the second also split by rows (TP 2 inside each expert on ranks 1 and 2).
  const Shape shape{3, 16, 6};
  ShardedSource source{{{"w", DType::kInt32, shape}}, {}};
  source.ranks.push_back({{"w", "w", Box::whole(), {15, 0, 2, 4, 6, 8, 10, 12}, 1}});
  source.ranks.push_back({{"w", "w", Box::split(shape, 2, 2, 0), {13, 11, 9, 7, 5, 3, 1, 14}, 1}});
  source.ranks.push_back({{"w", "w", Box::split(shape, 2, 2, 1), {13, 11, 9, 7, 5, 3, 1, 14}, 1}});
  ShardedTarget target;
  const ExpertMap engine = shuffled_map(16, 2, 9);
  for (const Experts& local : engine.ranks) {
    target.ranks.push_back({{"w", DType::kInt32, {3, 8, 6}, {{"w", Box::whole(), {0, 0, 0}, local, 1}}}});
  }
  check_every_element(source, target, compute(source, target));
}

TEST_CASE("experts: a run of consecutive experts is one strided read per trainer shard",
          "[sharding][experts]") {
  Moe moe;
  moe.layers = 1;
  // Engine rank 0 holds experts 2..9 in order (one run), rank 1 the others.
  const ExpertMap engine{moe.experts, {{2, 3, 4, 5, 6, 7, 8, 9}, {0, 1, 10, 11, 12, 13, 14, 15}}};
  SECTION("whole experts: one contiguous read per fused part") {
    const RoutingPlan plan =
        compute(moe.source(ExpertMap::contiguous(moe.experts, 1), 1), moe.target(engine));
    CHECK(reads_into(plan, 0, "layers.0.w13") == 2);  // gate, up
    CHECK(reads_into(plan, 0, "layers.0.w2") == 1);
    const PlannedRead& w2 = plan.reads(0, 0)[1];  // w1, w2, w3 in layout order
    CHECK(w2.dest == "layers.0.w2");
    CHECK(w2.count * w2.length == 8u * 4 * 8 * 4);
    CHECK(reads_into(plan, 1, "layers.0.w2") == 2);  // runs 0..1 and 10..15
  }
  SECTION("TP inside experts: one read per TP rank, the experts' rows joined") {
    const RoutingPlan plan =
        compute(moe.source(ExpertMap::contiguous(moe.experts, 1), 2), moe.target(engine));
    CHECK(reads_into(plan, 0, "layers.0.w13") == 4);  // gate, up from each of 2 TP ranks
    CHECK(reads_into(plan, 0, "layers.0.w2") == 2);   // a column split: 8 experts x 4 rows in one read
    for (std::size_t r = 0; r < 2; ++r) {
      for (const PlannedRead& read : plan.reads(0, r)) {
        if (read.dest == "layers.0.w2") CHECK(read.count == 8u * 4);
        if (read.dest == "layers.0.w13") CHECK(read.count == 8u);
      }
    }
  }
  SECTION("experts in reverse order: one read per expert") {
    const ExpertMap reversed{moe.experts, {{9, 8, 7, 6, 5, 4, 3, 2}, {0, 1, 10, 11, 12, 13, 14, 15}}};
    const RoutingPlan plan =
        compute(moe.source(ExpertMap::contiguous(moe.experts, 1), 1), moe.target(reversed));
    CHECK(reads_into(plan, 0, "layers.0.w2") == 8);
  }
}

TEST_CASE("experts: a new expert map is a new plan over the same destination shapes", "[sharding][experts]") {
  Moe moe;
  const ShardedSource source = moe.source(ExpertMap::contiguous(moe.experts, 2), 2);
  const ShardedTarget before = moe.target(ExpertMap::contiguous(moe.experts, 4));
  const ShardedTarget after = moe.target(shuffled_map(moe.experts, 4, 11));
  const RoutingPlan first = compute(source, before);
  const RoutingPlan second = compute(source, after);
  check_every_element(source, before, first);
  check_every_element(source, after, second);
  for (std::size_t g = 0; g < 4; ++g) {
    CHECK(before.ranks[g][0].bytes() == after.ranks[g][0].bytes());
    std::uint64_t a = 0, b = 0;
    for (std::size_t r = 0; r < 4; ++r) a += first.bytes(g, r), b += second.bytes(g, r);
    CHECK(a == b);
  }
}

namespace {

struct ExpertSetup {
  Moe moe;
  ShardedSource source = moe.source(ExpertMap::contiguous(16, 2), 1);
  ShardedTarget target = moe.target(ExpertMap::contiguous(16, 2));
};

void require_refused(const ExpertSetup& setup, const std::vector<std::string>& phrases) {
  auto plan = RoutingPlan::compute(setup.source, setup.target);
  REQUIRE_FALSE(plan.ok());
  INFO(plan.status().message());
  CHECK(plan.status().code() == ErrorCode::kInvalidArgument);
  for (const auto& phrase : phrases) CHECK_THAT(plan.status().message(), Catch::Contains(phrase));
}

}  // namespace

TEST_CASE("experts: the starting point of the refusals is valid", "[sharding][experts]") {
  ExpertSetup setup;
  check_every_element(setup.source, setup.target, compute(setup.source, setup.target));
}

TEST_CASE("experts: compute refuses bad expert lists", "[sharding][experts]") {
  SECTION("an expert id out of range (a hostile or stale map)") {
    ExpertSetup setup;
    setup.target.ranks[0][1].pieces[0].experts[3] = 16;
    require_refused(setup, {"'layers.0.experts.w2'", "expert 16", "outside [0, 16)"});
    setup.target.ranks[0][1].pieces[0].experts[3] = -1;
    require_refused(setup, {"expert -1"});
  }
  SECTION("an expert listed twice") {
    ExpertSetup setup;
    setup.source.ranks[1][0].experts[2] = setup.source.ranks[1][0].experts[0];
    require_refused(setup, {"trainer rank 1", "'layers.0.experts.w1'", "twice"});
  }
  SECTION("an expert dimension the tensor does not have") {
    ExpertSetup setup;
    setup.target.ranks[1][0].pieces[1].expert_dim = 3;
    require_refused(setup, {"'layers.0.experts.w3'", "expert_dim 3"});
  }
  SECTION("a box that does not span the expert dimension") {
    ExpertSetup setup;
    setup.source.ranks[0][0].box = Box::split({16, 8, 4}, 0, 2, 0);
    require_refused(setup, {"'layers.0.experts.w1'", "whole expert dimension"});
  }
  SECTION("more experts than the destination has room for") {
    ExpertSetup setup;
    setup.target.ranks[0][1].pieces[0].experts.push_back(9);  // rank 0 has room for 8
    require_refused(setup, {"'layers.0.experts.w2'", "outside the destination"});
  }
  SECTION("fewer experts than the destination holds") {
    ExpertSetup setup;
    setup.target.ranks[0][1].pieces[0].experts.pop_back();
    require_refused(setup, {"'layers.0.w2'", "not covered"});
  }
  SECTION("an expert no trainer rank holds") {
    ExpertSetup setup;
    setup.source.ranks[1][1].experts.pop_back();  // expert 15 of w2
    require_refused(setup, {"'layers.0.experts.w2'", "held by no trainer rank"});
  }
  SECTION("trainer ranks holding one expert in runs that differ") {
    ExpertSetup setup;
    setup.source.ranks[1][0].experts = {7, 8, 9, 10, 11, 12, 13, 14, 15};  // 7 is also in rank 0's 0..7
    require_refused(setup, {"'layers.0.experts.w1'", "overlaps"});
  }
}

TEST_CASE("experts: a tensor claiming 2^40 experts costs memory in the lists, not in E",
          "[sharding][experts]") {
  const Shape shape{std::int64_t{1} << 40, 1};
  ShardedSource source{{{"w", DType::kInt8, shape}},
                       {{{"w", "w", Box::whole(), {(std::int64_t{1} << 40) - 1, 7}, 0}}}};
  ShardedTarget target{
      {{{"w", DType::kInt8, {2, 1}, {{"w", Box::whole(), {0, 0}, {7, (std::int64_t{1} << 40) - 1}, 0}}}}}};
  const RoutingPlan plan = compute(source, target);
  CHECK(plan.bytes(0, 0) == 2);
  target.ranks[0][0].pieces[0].experts = {7, 7};
  auto refused = RoutingPlan::compute(source, target);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("expert 7 twice"));
}

TEST_CASE("experts: compute_rank gives one engine rank's reads of compute, alone", "[sharding][experts]") {
  ExpertSetup setup;
  setup.source.ranks.push_back(setup.source.ranks[0]);  // replicas: chosen by engine rank
  setup.target = setup.moe.target(shuffled_map(16, 4, 3));
  const RoutingPlan all = compute(setup.source, setup.target);
  for (std::size_t g = 0; g < 4; ++g) {
    auto one = RoutingPlan::compute_rank(setup.source, setup.target, g);
    REQUIRE(one.ok());
    CHECK(one->engine_ranks() == 4);
    CHECK(one->trainer_ranks() == 3);
    for (std::size_t h = 0; h < 4; ++h) {
      for (std::size_t r = 0; r < 3; ++r) {
        const auto& got = one->reads(h, r);
        if (h != g) {
          CHECK(got.empty());
          continue;
        }
        const auto& want = all.reads(g, r);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          CHECK((got[i].source == want[i].source && got[i].offset == want[i].offset &&
                 got[i].length == want[i].length && got[i].count == want[i].count &&
                 got[i].stride == want[i].stride && got[i].dest == want[i].dest &&
                 got[i].dest_offset == want[i].dest_offset && got[i].dest_stride == want[i].dest_stride));
        }
      }
    }
  }
  auto refused = RoutingPlan::compute_rank(setup.source, setup.target, 4);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("experts: equal runs on two trainer ranks are replicas", "[sharding][experts]") {
  ExpertSetup setup;
  setup.source.ranks.push_back(setup.source.ranks[0]);  // rank 2: a data-parallel copy of rank 0
  const RoutingPlan plan = compute(setup.source, setup.target);
  check_every_element(setup.source, setup.target, plan);
}

// ---------------------------------------------------------------------------
// Re-plan time: 256 experts x 60 layers, 8 trainer ranks (EP 4 x TP 2), 16
// engine ranks (EP 16, an EPLB-like shuffled map), DeepSeek-V3-sized experts.

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The same placement as `target` with every expert list expanded into one
// piece per expert (what the plan took before expert lists): the baseline.
ShardedTarget one_piece_per_expert(const ShardedTarget& target) {
  ShardedTarget out = target;
  for (auto& rank : out.ranks) {
    for (auto& dest : rank) {
      std::vector<DestinationPiece> pieces;
      for (const auto& piece : dest.pieces) {
        const Shape whole = dest.shape;  // [n, ...]: the piece's other dimensions are whole here
        for (std::size_t i = 0; i < piece.experts.size(); ++i) {
          Shape start(whole.size(), 0), size = whole;
          start[0] = piece.experts[i];
          size[0] = 1;
          if (dest.name.find("w13") != std::string::npos) size[1] /= 2;  // gate or up
          Shape at = piece.at;
          at[0] = static_cast<std::int64_t>(i);
          pieces.push_back({piece.tensor, Box{start, size}, at});
        }
      }
      dest.pieces = std::move(pieces);
    }
  }
  return out;
}

struct Timing {
  std::vector<double> ms;
  std::size_t reads = 0;
};

void print_timing(const char* what, const Timing& t) {
  std::printf("  %-58s median %6.2f ms (min %6.2f, max %6.2f), %zu reads, %zu runs\n", what, median_of(t.ms),
              *std::min_element(t.ms.begin(), t.ms.end()), *std::max_element(t.ms.begin(), t.ms.end()),
              t.reads, t.ms.size());
}

}  // namespace

TEST_CASE("experts: re-plan 256 experts x 60 layers over 8 trainer x 16 engine ranks",
          "[.][moe-replan-perf]") {
  Moe moe;
  moe.experts = 256, moe.layers = 60, moe.ff = 2048, moe.d = 7168;
  moe.dtype = DType::kBFloat16;
  const ShardedSource source = moe.source(ExpertMap::contiguous(256, 4), 2);
  ExpertMap scattered{256, std::vector<Experts>(4)};  // trainer EP rank k holds experts k, k + 4, ...
  for (std::int64_t e = 0; e < 256; ++e) scattered.ranks[static_cast<std::size_t>(e % 4)].push_back(e);
  const ShardedSource scattered_source = moe.source(scattered, 2);
  Timing lists, baseline, scattered_trainer, bind, one_rank;
  const auto time_plan = [](const ShardedSource& s, const ShardedTarget& t, Timing* timing) {
    const auto start = std::chrono::steady_clock::now();
    auto plan = RoutingPlan::compute(s, t);
    timing->ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    REQUIRE(plan.ok());
    timing->reads = plan->read_count();
    return std::move(plan).value();
  };
  for (std::uint32_t run = 0; run < 7; ++run) {  // interleaved: the same load on each
    const ShardedTarget target = moe.target(shuffled_map(256, 16, 100 + run));  // a new EPLB map each run
    const RoutingPlan plan = time_plan(source, target, &lists);
    time_plan(source, one_piece_per_expert(target), &baseline);
    time_plan(scattered_source, target, &scattered_trainer);
    {
      const auto start = std::chrono::steady_clock::now();
      auto mine = RoutingPlan::compute_rank(source, target, run % 16);
      one_rank.ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      REQUIRE(mine.ok());
      one_rank.reads = mine->read_count();
    }
    std::vector<std::uint8_t> base(1);
    std::unordered_map<std::string, void*> buffers;
    for (const auto& dest : target.ranks[0]) buffers[dest.name] = base.data();
    const auto bind_start = std::chrono::steady_clock::now();
    for (std::size_t g = 0; g < 16; ++g) REQUIRE(plan.bind(g, buffers).ok());
    bind.ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - bind_start).count());
    for (std::size_t g = 0; g < 16; ++g) {
      std::uint64_t bytes = 0;
      for (std::size_t r = 0; r < 8; ++r) bytes += plan.bytes(g, r);
      CHECK(bytes == 16u * moe.expert_bytes() * 60u);  // exactly its 16 experts' bytes
    }
  }
  bind.reads = lists.reads;
  std::printf(
      "moe re-plan: 256 experts x 60 layers (%zu global tensors), 8 trainer (EP 4 x TP 2) x 16 engine "
      "ranks:\n",
      source.tensors.size());
  print_timing("compute, expert lists (the figure)", lists);
  print_timing("compute, one piece per expert (baseline)", baseline);
  print_timing("compute, trainer holding scattered experts", scattered_trainer);
  print_timing("bind of all 16 engine ranks", bind);
  print_timing("compute_rank: one engine rank's plan alone", one_rank);
  CHECK(median_of(lists.ms) < 50.0);
}
