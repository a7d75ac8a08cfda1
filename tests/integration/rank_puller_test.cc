// RankPuller: re-planning an engine rank's expert placement between pulls
// over real publishers (tcp and shm, checksums on): the same buffers and
// connections, no new memory registration after the first pull, a pull in
// flight finishing in the old placement, the next one in the new, every
// element checked; plans that do not fit the buffers are refused.
#include <catch2/catch.hpp>

#include <cstring>
#include <future>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "peers.h"
#include "weightsync/rank_puller.h"

using namespace weightsync;
using namespace wstest;

namespace {

using Shape = std::vector<std::int64_t>;
using Experts = std::vector<std::int64_t>;

constexpr std::int64_t kExperts = 16, kLayers = 2, kFf = 8, kD = 4;

std::string name(std::int64_t layer, const std::string& w) {
  return "layers." + std::to_string(layer) + ".experts." + w;
}
Shape shape(const std::string& w) {
  return w == "w2" ? Shape{kExperts, kD, kFf} : Shape{kExperts, kFf, kD};
}

// Element `index` (global coordinates) of global tensor `t` at `version`.
std::uint32_t value_at(std::size_t t, const Shape& s, const Shape& index, std::uint64_t version) {
  std::uint64_t linear = 0;
  for (std::size_t d = 0; d < s.size(); ++d) linear = linear * s[d] + index[d];
  return static_cast<std::uint32_t>((t + 1) * 1000003 + linear + version * 7919);
}

template <typename F>
void for_each_index(const Shape& s, F&& f) {
  Shape index(s.size(), 0);
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  for (std::int64_t i = 0; i < n; ++i) {
    f(index);
    for (std::size_t d = s.size(); d-- > 0;) {
      if (++index[d] < s[d]) break;
      index[d] = 0;
    }
  }
}

// Global coordinates of local element `local` of a box holding `experts` along dim 0.
Shape to_global(const Box& box, const Experts& experts, const Shape& local) {
  Shape global(local.size());
  for (std::size_t d = 0; d < local.size(); ++d) {
    global[d] = d == 0 ? experts[local[d]] : (box.start.empty() ? 0 : box.start[d]) + local[d];
  }
  return global;
}

// Trainer: 2 ranks, experts 0..7 and 8..15 (EP 2), each whole.
ShardedSource moe_source() {
  ShardedSource source;
  for (std::int64_t l = 0; l < kLayers; ++l) {
    for (const char* w : {"w1", "w2", "w3"}) source.tensors.push_back({name(l, w), DType::kInt32, shape(w)});
  }
  const ExpertMap ep = ExpertMap::contiguous(kExperts, 2);
  for (const Experts& held : ep.ranks) {
    std::vector<TrainerShard> shards;
    for (const auto& t : source.tensors) shards.push_back({t.name, t.name, Box::whole(), held, 0});
    source.ranks.push_back(std::move(shards));
  }
  return source;
}

// Engine: a fused w13 [n, 2 ff, d] and w2 [n, d, ff] per layer for each rank of `map`.
ShardedTarget moe_target(const ExpertMap& map) {
  ShardedTarget target;
  for (const Experts& local : map.ranks) {
    const auto n = static_cast<std::int64_t>(local.size());
    std::vector<DestinationTensor> tensors;
    for (std::int64_t l = 0; l < kLayers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      tensors.push_back({p + "w13",
                         DType::kInt32,
                         {n, 2 * kFf, kD},
                         {{name(l, "w1"), Box::whole(), {0, 0, 0}, local, 0},
                          {name(l, "w3"), Box::whole(), {0, kFf, 0}, local, 0}}});
      tensors.push_back(
          {p + "w2", DType::kInt32, {n, kD, kFf}, {{name(l, "w2"), Box::whole(), {0, 0, 0}, local, 0}}});
    }
    target.ranks.push_back(std::move(tensors));
  }
  return target;
}

ExpertMap shuffled(std::uint32_t seed) {
  Experts ids(kExperts);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ExpertMap map{kExperts, std::vector<Experts>(2)};
  for (std::size_t i = 0; i < ids.size(); ++i) map.ranks[i % 2].push_back(ids[i]);
  return map;
}

std::size_t tensor_number(const ShardedSource& source, const std::string& n) {
  for (std::size_t t = 0; t < source.tensors.size(); ++t) {
    if (source.tensors[t].name == n) return t;
  }
  return 0;
}

// Publishes `version` on trainer rank r: every element its global value.
void publish_rank(Publisher& publisher, const ShardedSource& source, std::size_t r, std::uint64_t version) {
  auto writer = publisher.begin_publish(version);
  REQUIRE(writer.ok());
  for (std::size_t i = 0; i < source.ranks[r].size(); ++i) {
    const TrainerShard& shard = source.ranks[r][i];
    const std::size_t t = tensor_number(source, shard.tensor);
    const TensorEntry& entry = publisher.layout().tensors()[i];
    auto* out = reinterpret_cast<std::uint32_t*>(static_cast<std::uint8_t*>(writer->data()) + entry.offset);
    std::int64_t k = 0;
    for_each_index(entry.spec.shape, [&](const Shape& local) {
      out[k++] = value_at(t, source.tensors[t].shape, to_global(shard.box, shard.experts, local), version);
    });
  }
  REQUIRE(writer->commit().ok());
}

// Elements of engine rank g's tensors that differ from `map`'s placement at `version`.
std::size_t wrong_elements(const ShardedSource& source, const std::vector<DestinationTensor>& tensors,
                           const std::map<std::string, std::vector<std::uint32_t>>& buffers,
                           std::uint64_t version) {
  std::size_t wrong = 0;
  for (const DestinationTensor& dest : tensors) {
    const auto& got = buffers.at(dest.name);
    for (const DestinationPiece& piece : dest.pieces) {
      const std::size_t t = tensor_number(source, piece.tensor);
      Shape s = source.tensors[t].shape;
      s[0] = static_cast<std::int64_t>(piece.experts.size());
      for_each_index(s, [&](const Shape& local) {
        std::int64_t linear = 0;
        for (std::size_t d = 0; d < s.size(); ++d) linear = linear * dest.shape[d] + piece.at[d] + local[d];
        const std::uint32_t want =
            value_at(t, source.tensors[t].shape, to_global(piece.from, piece.experts, local), version);
        wrong += got[static_cast<std::size_t>(linear)] != want ? 1 : 0;
      });
    }
  }
  return wrong;
}

struct Trainer {
  ShardedSource source = moe_source();
  std::vector<std::unique_ptr<Publisher>> publishers;
  std::vector<std::string> addresses;

  explicit Trainer(ShardedSource published = moe_source()) : source(std::move(published)) {
    for (std::size_t r = 0; r < source.ranks.size(); ++r) {
      PublisherOptions options;
      options.checksum = true;
      auto p = Publisher::create(*source.rank_layout(r), options);
      REQUIRE(p.ok());
      addresses.push_back((*p)->address());
      publishers.push_back(std::move(*p));
    }
  }
  void publish(std::uint64_t version) {
    for (std::size_t r = 0; r < publishers.size(); ++r) publish_rank(*publishers[r], source, r, version);
  }
};

// Engine rank 0's buffers, sized for 8 experts (what every map here gives it).
struct EngineBuffers {
  std::map<std::string, std::vector<std::uint32_t>> data;
  std::vector<ScatterEntry> entries;

  explicit EngineBuffers(const std::vector<DestinationTensor>& tensors) {
    for (const auto& dest : tensors) data[dest.name].assign(dest.bytes() / 4, 0xCDCDCDCD);
    for (auto& [n, v] : data) entries.push_back({n, v.data(), v.size() * 4});
  }
};

RoutingPlan plan_for(const ShardedSource& source, const ExpertMap& map) {
  auto plan = RoutingPlan::compute(source, moe_target(map));
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

}  // namespace

TEST_CASE("rank puller: a new expert map lands at the next pull, no new registration", "[rank-puller]") {
  const std::string transport = GENERATE(std::string("tcp"), std::string("shm"));
  INFO(transport);
  Trainer trainer;
  const ExpertMap before = ExpertMap::contiguous(kExperts, 2);
  const ExpertMap after = shuffled(5);
  const auto target_before = moe_target(before), target_after = moe_target(after);
  EngineBuffers buffers(target_before.ranks[0]);
  auto group = SubscriberGroup::connect(trainer.addresses, quick_options(5000, transport));
  REQUIRE(group.ok());
  auto puller = RankPuller::create(std::move(*group), 0, buffers.entries, plan_for(trainer.source, before));
  INFO(puller.status().to_string());
  REQUIRE(puller.ok());
  RankPuller& p = **puller;
  CHECK(p.plan() == 1);

  trainer.publish(1);
  GroupPullOptions wait;
  wait.wait = std::chrono::seconds(5);
  auto first = p.pull(wait);
  REQUIRE(first.ok());
  CHECK(first->plan == 1);
  CHECK(first->group.version == 1);
  CHECK(first->group.checksums_verified);
  CHECK(wrong_elements(trainer.source, target_before.ranks[0], buffers.data, 1) == 0);
  // Exactly engine rank 0's 8 experts (w1, w2, w3 of each, per layer).
  CHECK(first->group.bytes == 8u * 3 * kFf * kD * 4 * kLayers);
  const SubscriberStats after_first = p.group().stats();

  // A pull in flight (waiting for version 2) keeps the plan it started with.
  auto in_flight = std::async(std::launch::async, [&] { return p.pull(wait); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (p.pulls_started() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(p.pulls_started() == 2);
  auto id = p.replan(plan_for(trainer.source, after));
  REQUIRE(id.ok());
  CHECK(*id == 2);
  trainer.publish(2);
  auto second = in_flight.get();
  INFO(second.status().to_string());
  REQUIRE(second.ok());
  CHECK(second->plan == 1);
  CHECK(second->group.version == 2);
  CHECK(wrong_elements(trainer.source, target_before.ranks[0], buffers.data, 2) == 0);

  // The next pull lands in the new placement.
  trainer.publish(3);
  auto third = p.pull(wait);
  REQUIRE(third.ok());
  CHECK(third->plan == 2);
  CHECK(p.plan() == 2);
  CHECK(third->group.version == 3);
  CHECK(third->group.checksums_verified);
  CHECK(wrong_elements(trainer.source, target_after.ranks[0], buffers.data, 3) == 0);
  CHECK(third->group.bytes == first->group.bytes);

  // No memory registered after the first pull; one new view per trainer rank
  // read (with checksums, the publisher hashes exactly the new reads).
  const SubscriberStats now = p.group().stats();
  CHECK(now.registrations == after_first.registrations);
  CHECK(now.views == after_first.views + 2);
  WARN(transport << ": " << now.registrations << " memory registrations in all, " << now.views << " views");
}

TEST_CASE("rank puller: plans that do not fit the buffers or the group are refused", "[rank-puller]") {
  Trainer trainer;
  const ExpertMap map = ExpertMap::contiguous(kExperts, 2);
  EngineBuffers buffers(moe_target(map).ranks[0]);
  auto group = SubscriberGroup::connect(trainer.addresses, quick_options(5000, "tcp"));
  REQUIRE(group.ok());
  auto puller = RankPuller::create(std::move(*group), 0, buffers.entries, plan_for(trainer.source, map));
  REQUIRE(puller.ok());
  RankPuller& p = **puller;

  SECTION("a map giving the rank more experts than its buffers hold") {
    ExpertMap bigger{kExperts, {{0, 1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15}}};
    auto refused = p.replan(plan_for(trainer.source, bigger));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(refused.status().message(), Catch::Contains("past the end"));
  }
  SECTION("a plan for another number of trainer ranks") {
    ShardedSource one_rank = trainer.source;
    one_rank.ranks = {one_rank.ranks[0]};
    for (auto& shard : one_rank.ranks[0]) shard.experts = ExpertMap::contiguous(kExperts, 1).ranks[0];
    auto refused = p.replan(plan_for(one_rank, map));
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(), Catch::Contains("trainer ranks"));
  }
  SECTION("a plan without this engine rank") {
    ShardedTarget none;
    auto plan = RoutingPlan::compute(trainer.source, none);
    REQUIRE(plan.ok());
    CHECK_FALSE(p.replan(*plan).ok());
  }
  // The plan in force is untouched: the next pull uses it.
  trainer.publish(1);
  GroupPullOptions wait;
  wait.wait = std::chrono::seconds(5);
  auto pulled = p.pull(wait);
  REQUIRE(pulled.ok());
  CHECK(pulled->plan == 1);
  CHECK(wrong_elements(trainer.source, moe_target(map).ranks[0], buffers.data, 1) == 0);
}

TEST_CASE("rank puller: a trainer rank publishing fewer experts than the plan reads is refused",
          "[rank-puller]") {
  // Trainer rank 1 publishes experts 8..11 only (a smaller layout, by mistake or
  // on purpose); the engine planned for 8..15.
  ShardedSource published = moe_source();
  for (auto& shard : published.ranks[1]) shard.experts = {8, 9, 10, 11};
  Trainer trainer(published);
  const ExpertMap map = ExpertMap::contiguous(kExperts, 2);
  EngineBuffers buffers(moe_target(map).ranks[1]);
  auto group = SubscriberGroup::connect(trainer.addresses, quick_options(5000, "tcp"));
  REQUIRE(group.ok());
  auto puller = RankPuller::create(std::move(*group), 1, buffers.entries, plan_for(moe_source(), map));
  REQUIRE_FALSE(puller.ok());
  INFO(puller.status().to_string());
  CHECK(puller.status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("rank puller: a staged plan that fails to prepare is dropped, the plan in force kept",
          "[rank-puller]") {
  ShardedSource published = moe_source();
  for (auto& shard : published.ranks[1]) shard.experts = {8, 9, 10, 11};  // rank 1 publishes fewer experts
  Trainer trainer(published);
  const ExpertMap first{kExperts, {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}};
  const ExpertMap second{kExperts, {{8, 9, 10, 11, 12, 13, 14, 15}, {0, 1, 2, 3, 4, 5, 6, 7}}};
  EngineBuffers buffers(moe_target(first).ranks[0]);
  auto group = SubscriberGroup::connect(trainer.addresses, quick_options(5000, "tcp"));
  REQUIRE(group.ok());
  // Engine rank 0 reads only trainer rank 0 under the first map: fine.
  auto puller = RankPuller::create(std::move(*group), 0, buffers.entries, plan_for(moe_source(), first));
  REQUIRE(puller.ok());
  RankPuller& p = **puller;
  // The second map reads experts 12..15 from trainer rank 1, which does not publish them.
  auto id = p.replan(plan_for(moe_source(), second));
  REQUIRE(id.ok());  // it fits the buffers; only the publisher's layout can refuse it
  trainer.publish(1);
  GroupPullOptions wait;
  wait.wait = std::chrono::seconds(5);
  auto refused = p.pull(wait);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
  CHECK(p.plan() == 1);
  auto pulled = p.pull(wait);  // the staged plan is gone: plan 1 again, version 1
  INFO(pulled.status().to_string());
  REQUIRE(pulled.ok());
  CHECK(pulled->plan == 1);
  CHECK(pulled->group.version == 1);
  CHECK(wrong_elements(published, moe_target(first).ranks[0], buffers.data, 1) == 0);
}
