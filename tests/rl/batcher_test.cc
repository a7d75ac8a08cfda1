// The per-environment buffers (algorithms/environment_buffers.h) and Marin's
// token-budget batcher (algorithms/token_budget_batcher.h), against
// hand-computed values: the deficit order, newest groups first, whole groups
// only, the budget never exceeded, the fractions kept over many steps, the
// spill wait, staleness first; the per-environment counters and metrics; the
// parsing of --env-fractions.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "algorithms/environment_buffers.h"
#include "algorithms/token_budget_batcher.h"

using namespace algorithms;

namespace {

struct Episode {
  std::size_t tokens = 10;
  std::size_t generated = 4;
  double reward = 0.0;
  bool correct = false;
  bool truncated = false;
};

// A group of the given episodes on compositional:<difficulty> (or simple).
TrajectoryGroup group_of(const std::string& difficulty, std::vector<Episode> episodes, std::uint64_t version,
                         std::uint64_t sequence = 0) {
  TrajectoryGroup g;
  g.version_start = version;
  g.version_end = version;
  g.sequence = sequence;
  for (const Episode& e : episodes) {
    rollout::Trajectory t;
    if (difficulty == "simple") {
      t.task.kind = zorplex::TaskKind::kSimple;
    } else {
      t.task.kind = zorplex::TaskKind::kCompositional;
      t.task.difficulty = difficulty == "easy" ? zorplex::Difficulty::kEasy : zorplex::Difficulty::kMedium;
    }
    t.tokens.assign(e.tokens, 1);
    t.generated.assign(e.tokens, 0);
    for (std::size_t i = 0; i < e.generated && i < e.tokens; ++i) t.generated[e.tokens - 1 - i] = 1;
    t.log_probs.assign(e.tokens, 0.0f);
    t.score.reward = e.reward;
    t.score.correct = e.correct;
    t.truncated = e.truncated;
    g.trajectories.push_back(t);
  }
  return g;
}

// Two trajectories (rewards 1 and 0: a signal) of `tokens` tokens in all.
TrajectoryGroup sized(const std::string& difficulty, std::size_t tokens, std::uint64_t version,
                      std::uint64_t sequence) {
  const std::size_t half = tokens / 2;
  return group_of(difficulty, {{half, 2, 1.0, true}, {tokens - half, 2, 0.0}}, version, sequence);
}

std::string order_of(const BatchPlan& plan) {
  std::string out;
  for (const Pick& p : plan.picks) out += p.environment == "compositional:easy" ? "E" : "M";
  return out;
}

BatcherOptions budget_of(std::uint64_t tokens, std::map<std::string, double> fractions = {}) {
  BatcherOptions options;
  options.token_budget = tokens;
  options.fractions = std::move(fractions);
  return options;
}

const std::string kEasy = "compositional:easy";
const std::string kMedium = "compositional:medium";

}  // namespace

TEST_CASE(
    "token budget batcher: the environment furthest below its share of the tokens taken so far goes next",
    "[rl][algorithms][batcher]") {
  const std::vector<EnvironmentSupply> supply{{kEasy, std::vector<std::uint64_t>(8, 100), 100},
                                              {kMedium, std::vector<std::uint64_t>(8, 100), 100}};
  // Shares 0.25 / 0.75 of 800 tokens. Taken so far T, deficit = share x T -
  // own: T=0 tie, the larger share (M); T=100 E +25, M -25 (E); T=200 E -50,
  // M +50 (M); T=300 E -25, M +25 (M); T=400 tie at 0 (M); T=500 E +25 (E);
  // T=600 M +50 (M); T=700 M +25 (M).
  const BatchPlan plan = plan_batch(supply, budget_of(800, {{kEasy, 0.25}, {kMedium, 0.75}}));
  CHECK(order_of(plan) == "MEMMMEMM");
  CHECK(plan.tokens == 800);
  CHECK(plan.find(kEasy)->tokens == 200);
  CHECK(plan.find(kEasy)->quota == 200);
  CHECK(plan.find(kMedium)->tokens == 600);
  // Equal shares without fractions: the two alternate, the first supplied first.
  CHECK(order_of(plan_batch(supply, budget_of(600))) == "EMEMEM");
}

TEST_CASE("token budget batcher: newest groups first within an environment", "[rl][algorithms][batcher]") {
  EnvironmentBuffers buffers(ReplayOptions{4, true, 64});
  for (std::uint64_t s = 0; s < 4; ++s) buffers.add(sized("easy", 100, 3, s));
  const std::vector<EnvironmentSupply> supply = buffers.supply(3);
  REQUIRE(supply.size() == 1);
  const BatchPlan plan = plan_batch(supply, budget_of(250));
  REQUIRE(plan.picks.size() == 2);
  const std::vector<TrajectoryGroup> taken = buffers.take_planned(plan);
  REQUIRE(taken.size() == 2);
  CHECK(taken[0].sequence == 3);
  CHECK(taken[1].sequence == 2);
  // The older two stay queued, oldest first for the FIFO take.
  CHECK(buffers.size() == 2);
  const std::vector<TrajectoryGroup> rest = buffers.take(5, 3);
  REQUIRE(rest.size() == 2);
  CHECK(rest[0].sequence == 0);
  CHECK(rest[1].sequence == 1);
}

TEST_CASE(
    "token budget batcher: whole groups only, one that does not fit is skipped and older ones still fit",
    "[rl][algorithms][batcher]") {
  // Newest first: 300 fits (100 left), 150 does not and is skipped, 80 fits.
  const BatchPlan plan = plan_batch({{kEasy, {300, 150, 80}, 80}}, budget_of(400));
  REQUIRE(plan.picks.size() == 2);
  CHECK(plan.picks[0].index == 0);
  CHECK(plan.picks[1].index == 2);
  CHECK(plan.tokens == 380);
  CHECK(plan.find(kEasy)->left == 1);
  // Left with a group that did not fit, the environment is not short: the
  // budget, not its supply, stopped it.
  CHECK_FALSE(plan.find(kEasy)->short_of_share);
  // A group larger than the whole budget is never taken.
  CHECK(plan_batch({{kEasy, {500}, 500}}, budget_of(400)).picks.empty());
}

TEST_CASE("token budget batcher: the budget is never exceeded and nothing that fits is left behind",
          "[rl][algorithms][batcher]") {
  std::mt19937 random(20240601);
  std::uniform_int_distribution<int> size(20, 400), count(0, 12), budget(300, 3000);
  for (int trial = 0; trial < 1000; ++trial) {
    const std::uint64_t tokens = static_cast<std::uint64_t>(budget(random));
    std::vector<EnvironmentSupply> supply;
    for (const std::string& name : {kEasy, kMedium, std::string("simple")}) {
      EnvironmentSupply s{name, {}, static_cast<std::uint64_t>(size(random))};
      for (int i = count(random); i > 0; --i)
        s.group_tokens.push_back(static_cast<std::uint64_t>(size(random)));
      supply.push_back(s);
    }
    std::map<std::string, double> fractions;  // equal shares, or a remainder to whoever has groups
    if (trial % 2 == 1) fractions = {{kEasy, 0.2}, {kMedium, 0.5}};
    const BatchPlan plan = plan_batch(supply, budget_of(tokens, fractions));
    REQUIRE(plan.tokens <= tokens);
    std::uint64_t sum = 0;
    std::set<std::pair<std::string, std::size_t>> picked;
    for (const Pick& p : plan.picks) {
      sum += p.tokens;
      CHECK(picked.insert({p.environment, p.index}).second);  // each group once
    }
    CHECK(sum == plan.tokens);
    // Maximal: every group not taken is larger than the budget left.
    for (const EnvironmentSupply& s : supply) {
      for (std::size_t i = 0; i < s.group_tokens.size(); ++i) {
        if (picked.count({s.name, i}) == 0) CHECK(s.group_tokens[i] > tokens - plan.tokens);
      }
    }
  }
}

TEST_CASE("token budget batcher: the fractions are kept step after step, within one group's tokens",
          "[rl][algorithms][batcher]") {
  std::mt19937 random(7);
  std::uniform_int_distribution<int> size(50, 150);
  const std::uint64_t budget = 2000, largest = 150;
  SECTION("0.3 and 0.7") {
    std::uint64_t easy = 0, total = 0;
    for (int step = 0; step < 50; ++step) {
      std::vector<EnvironmentSupply> supply{{kEasy, {}, 100}, {kMedium, {}, 100}};
      for (EnvironmentSupply& s : supply) {
        for (int i = 0; i < 30; ++i) s.group_tokens.push_back(static_cast<std::uint64_t>(size(random)));
      }
      const BatchPlan plan = plan_batch(supply, budget_of(budget, {{kEasy, 0.3}, {kMedium, 0.7}}));
      CHECK(plan.tokens + largest > budget);  // as full as whole groups allow
      CHECK(std::abs(static_cast<double>(plan.find(kEasy)->tokens) -
                     0.3 * static_cast<double>(plan.tokens)) <= static_cast<double>(largest));
      CHECK(std::abs(static_cast<double>(plan.find(kMedium)->tokens) -
                     0.7 * static_cast<double>(plan.tokens)) <= static_cast<double>(largest));
      easy += plan.find(kEasy)->tokens;
      total += plan.tokens;
    }
    CHECK(std::abs(static_cast<double>(easy) / static_cast<double>(total) - 0.3) <=
          static_cast<double>(largest) / static_cast<double>(budget));
  }
  SECTION("a remainder: 0.2 named, the other 0.8 spread over both") {
    std::vector<EnvironmentSupply> supply{{kEasy, std::vector<std::uint64_t>(40, 100), 100},
                                          {kMedium, std::vector<std::uint64_t>(40, 100), 100}};
    const BatchPlan plan = plan_batch(supply, budget_of(budget, {{kEasy, 0.2}}));
    CHECK(plan.tokens == budget);
    // Deficits even out: easy 0.2 T - e = -m, so e = 0.6 T, m = 0.4 T.
    CHECK(plan.find(kEasy)->tokens == 1200);
    CHECK(plan.find(kMedium)->tokens == 800);
    CHECK(plan.find(kMedium)->quota == 0);
  }
}

TEST_CASE("token budget batcher: a short environment is waited for, then spilled after the spill wait",
          "[rl][algorithms][batcher]") {
  const BatcherOptions options = budget_of(1000, {{kEasy, 0.5}, {kMedium, 0.5}});
  // Easy has nothing queued, medium plenty: medium fills the budget in the
  // plan, easy is short of its 500, and the bottleneck is easy alone.
  const std::vector<EnvironmentSupply> starved{{kEasy, {}, 100},
                                               {kMedium, std::vector<std::uint64_t>(20, 100), 100}};
  const BatchPlan plan = plan_batch(starved, options);
  CHECK(plan.find(kMedium)->tokens == 1000);
  CHECK(plan.find(kEasy)->short_of_share);
  CHECK(plan.find(kEasy)->shortfall() == 500);
  CHECK(plan.can_spill());
  SpillWait wait(2.0);
  CHECK_FALSE(wait.ready(plan, 10.0));  // the wait starts
  CHECK_FALSE(wait.ready(plan, 11.9));
  CHECK_FALSE(wait.spilled());
  CHECK(wait.ready(plan, 12.0));
  CHECK(wait.spilled());

  // Easy's groups arrive within the wait: no spill, and easy gets its share.
  std::vector<EnvironmentSupply> fed = starved;
  fed[0].group_tokens = std::vector<std::uint64_t>(5, 100);
  const BatchPlan full = plan_batch(fed, options);
  CHECK_FALSE(full.any_short());
  CHECK(full.find(kEasy)->tokens == 500);
  SpillWait in_time(2.0);
  CHECK_FALSE(in_time.ready(plan, 10.0));
  CHECK(in_time.ready(full, 11.0));
  CHECK_FALSE(in_time.spilled());

  // Everyone short (the generators are the bottleneck): no spill clock, the
  // step waits for groups as the group-count batch does; an empty plan never
  // is ready.
  const BatchPlan both_short = plan_batch({{kEasy, {100}, 100}, {kMedium, {100}, 100}}, options);
  CHECK(both_short.any_short());
  CHECK_FALSE(both_short.can_spill());
  SpillWait generators(0.0);
  CHECK_FALSE(generators.ready(both_short, 100.0));
  CHECK_FALSE(generators.ready(plan_batch({}, options), 100.0));
  // Within one of its groups of the quota: not short.
  const BatchPlan nearly = plan_batch({{kEasy, {100, 100, 100, 100}, 150}, {kMedium, {500}, 100}}, options);
  CHECK(nearly.find(kEasy)->tokens == 400);
  CHECK_FALSE(nearly.find(kEasy)->short_of_share);
  // Queued groups that do not fit are the budget's limit, not the supply's:
  // no wait for them (here an old group larger than the budget).
  const BatchPlan lumpy =
      plan_batch({{kEasy, {1200}, 100}, {kMedium, std::vector<std::uint64_t>(20, 100), 100}}, options);
  CHECK(lumpy.find(kEasy)->left == 1);
  CHECK_FALSE(lumpy.find(kEasy)->short_of_share);
  CHECK(SpillWait(2.0).ready(lumpy, 0.0));
  // A named environment never seen is short by its whole quota.
  const BatchPlan unseen = plan_batch({{kMedium, std::vector<std::uint64_t>(20, 100), 100}}, options);
  REQUIRE(unseen.find(kEasy) != nullptr);
  CHECK(unseen.find(kEasy)->shortfall() == 500);
}

TEST_CASE("environment buffers: staleness is applied before the batcher picks", "[rl][algorithms][batcher]") {
  EnvironmentBuffers buffers(ReplayOptions{4, true, 64});
  buffers.add(sized("easy", 100, 6, 0));
  buffers.add(sized("easy", 100, 1, 1));  // the newest arrival, sampled with version 1: stale at 6
  const BatchPlan plan = plan_batch(buffers.supply(6), budget_of(100));
  CHECK(buffers.counters(kEasy).groups_dropped_stale == 1);
  CHECK(buffers.counters(kEasy).trajectories_dropped_stale == 2);
  const std::vector<TrajectoryGroup> taken = buffers.take_planned(plan);
  REQUIRE(taken.size() == 1);
  CHECK(taken[0].sequence == 0);
  CHECK(buffers.size() == 0);
}

TEST_CASE("environment buffers: counters and Marin's metrics per environment, by hand",
          "[rl][algorithms][batcher]") {
  EnvironmentBuffers buffers(ReplayOptions{4, true, 64});
  buffers.declare("simple");
  // easy, version 5: tokens 10 + 20 + 30, generated 4 + 5 + 6, rewards 1.2,
  // 0.2, 0; one correct, one truncated.
  buffers.add(group_of("easy", {{10, 4, 1.2, true}, {20, 5, 0.2}, {30, 6, 0.0, false, true}}, 5, 0));
  // medium, version 4: tokens 40 + 50, generated 10 + 20, rewards 1, 0.
  buffers.add(group_of("medium", {{40, 10, 1.0, true}, {50, 20, 0.0}}, 4, 1));
  // medium, version 5, zero-variance: tokens 5 + 5, generated 2 + 2.
  buffers.add(group_of("medium", {{5, 2, 0.0}, {5, 2, 0.0}}, 5, 2));
  CHECK(buffers.counters().groups_received == 3);
  CHECK(buffers.counters().trajectories_received == 7);
  CHECK(buffers.counters(kMedium).groups_received == 2);
  CHECK(buffers.counters(kMedium).trajectories_received == 4);

  // Equal shares of 100 (three environments: 33 each). Ties go to the first
  // supplied: easy's 60 (40 left); then medium (deficit 20) its newest, the
  // zero-variance 10 (30 left); its 90 does not fit, simple has nothing.
  const BatchPlan plan = plan_batch(buffers.supply(5), budget_of(100));
  CHECK(plan.tokens == 70);
  const std::vector<TrajectoryGroup> batch = buffers.take_planned(plan);
  // The zero-variance group took its 10 tokens of the budget and is consumed,
  // counted, not returned.
  REQUIRE(batch.size() == 1);
  CHECK(batch[0].sequence == 0);
  CHECK(buffers.counters(kMedium).groups_dropped_zero_variance == 1);
  CHECK(buffers.counters(kMedium).groups_consumed == 1);
  CHECK(buffers.counters(kMedium).trajectories_consumed == 2);
  CHECK(buffers.counters(kMedium).groups_served == 0);
  CHECK(buffers.counters(kEasy).groups_served == 1);
  CHECK(buffers.counters(kEasy).trajectories_consumed == 3);
  CHECK(buffers.counters(kEasy).groups_dropped_zero_variance == 0);
  CHECK(buffers.counters().groups_consumed == 2);
  CHECK(buffers.counters().groups_served == 1);

  const auto metrics = buffers.step_metrics(batch, 5, {{"simple", 33}});
  REQUIRE(metrics.size() == 3);
  const EnvironmentMetrics& easy = metrics.at(kEasy);
  CHECK(easy.rollouts_in_buffer == 0);
  CHECK(easy.tokens_in_buffer == 0);
  CHECK(easy.frac_on_policy == 0.0);
  CHECK(easy.new_rollouts == 3);
  CHECK(easy.new_tokens == 60);
  CHECK(easy.new_generated_tokens == 15);
  // mean 1.4 / 3; E[r^2] = 1.48 / 3; std = sqrt(1.48/3 - (1.4/3)^2) = 0.524934.
  CHECK(easy.reward_mean == Approx(0.466667).epsilon(1e-5));
  CHECK(easy.reward_std == Approx(0.524934).epsilon(1e-5));
  CHECK(easy.correct_rate == Approx(1.0 / 3.0));
  CHECK(easy.frac_truncated == Approx(1.0 / 3.0));
  CHECK(easy.rollouts_used == 3);
  CHECK(easy.tokens_used == 60);
  CHECK(easy.frac_used == 1.0);
  CHECK(easy.spilled_tokens == 0);
  const EnvironmentMetrics& medium = metrics.at(kMedium);
  CHECK(medium.rollouts_in_buffer == 2);
  CHECK(medium.tokens_in_buffer == 90);
  CHECK(medium.frac_on_policy == 0.0);  // sampled with version 4, trained at 5
  CHECK(medium.new_rollouts == 4);
  CHECK(medium.new_tokens == 100);
  CHECK(medium.new_generated_tokens == 34);
  // rewards 1, 0, 0, 0: mean 0.25, std sqrt(0.25 - 0.0625) = 0.433013.
  CHECK(medium.reward_mean == Approx(0.25));
  CHECK(medium.reward_std == Approx(0.433013).epsilon(1e-5));
  CHECK(medium.correct_rate == Approx(0.25));
  CHECK(medium.frac_truncated == 0.0);
  CHECK(medium.rollouts_used == 0);
  CHECK(medium.frac_used == 0.0);
  CHECK(metrics.at("simple").new_rollouts == 0);
  CHECK(metrics.at("simple").spilled_tokens == 33);

  // The next step counts only what arrives after this one; the buffer stays.
  buffers.add(group_of("medium", {{7, 3, 1.0, true}, {9, 3, 0.0}}, 5, 3));
  const auto next = buffers.step_metrics({}, 5, {});
  CHECK(next.at(kEasy).new_rollouts == 0);
  CHECK(next.at(kEasy).reward_mean == 0.0);
  CHECK(next.at(kMedium).new_rollouts == 2);
  CHECK(next.at(kMedium).new_tokens == 16);
  CHECK(next.at(kMedium).rollouts_in_buffer == 4);
  CHECK(next.at(kMedium).tokens_in_buffer == 106);
  CHECK(next.at(kMedium).frac_on_policy == Approx(0.5));
  CHECK(next.at(kMedium).spilled_tokens == 0);
}

TEST_CASE("environment buffers: without the batcher, take is the replay buffer's across environments",
          "[rl][algorithms][batcher]") {
  // Oldest first over both queues, no-signal groups counting towards n,
  // capacity pushing out the oldest of any environment: as ReplayBuffer.
  EnvironmentBuffers buffers(ReplayOptions{4, true, 4});
  ReplayBuffer single(ReplayOptions{4, true, 4});
  const std::vector<TrajectoryGroup> arrivals{
      sized("easy", 10, 3, 0),
      sized("medium", 10, 3, 1),
      group_of("easy", {{4, 1, 0.0}, {4, 1, 0.0}}, 3, 2),  // zero-variance
      sized("medium", 10, 3, 3),
      sized("easy", 10, 3, 4),
      sized("medium", 10, 1, 5)};  // the last stale at 6
  for (const TrajectoryGroup& g : arrivals) {
    buffers.add(g);
    single.add(g);
  }
  CHECK(buffers.counters().groups_dropped_overflow == 2);
  CHECK(buffers.counters(kEasy).groups_dropped_overflow == 1);
  for (std::size_t n : {1, 2, 5}) {
    const auto a = buffers.take(n, 6);
    const auto b = single.take(n, 6);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].sequence == b[i].sequence);
  }
  const ReplayCounters& x = buffers.counters();
  const ReplayCounters& y = single.counters();
  CHECK(x.groups_received == y.groups_received);
  CHECK(x.groups_consumed == y.groups_consumed);
  CHECK(x.groups_served == y.groups_served);
  CHECK(x.groups_dropped_zero_variance == y.groups_dropped_zero_variance);
  CHECK(x.groups_dropped_stale == y.groups_dropped_stale);
  CHECK(x.groups_dropped_overflow == y.groups_dropped_overflow);
  CHECK(x.trajectories_consumed == y.trajectories_consumed);
}

TEST_CASE("token budget batcher: --env-fractions is parsed into canonical names, bad text refused",
          "[rl][algorithms][batcher]") {
  auto parsed = parse_env_fractions("compositional:easy=0.3, compositional:medium=0.7");
  REQUIRE(parsed);
  CHECK(parsed.value().size() == 2);
  CHECK(parsed.value().at(kEasy) == Approx(0.3));
  CHECK(parsed.value().at(kMedium) == Approx(0.7));
  auto canonical = parse_env_fractions("compositional=0.5,simple:hard=0.25");
  REQUIRE(canonical);
  CHECK(canonical.value().count(kEasy) == 1);
  CHECK(canonical.value().count("simple") == 1);
  CHECK(parse_env_fractions("").value().empty());
  CHECK(parse_env_fractions(
      "compositional:easy=0.1,compositional:medium=0.2,simple=0.7"));  // 1 despite rounding

  const std::vector<std::pair<std::string, std::string>> bad{
      {"compositional:easy=0.6,compositional:medium=0.5", "more than 1"},
      {"compositional:tricky=0.5", "unknown difficulty 'tricky'"},
      {"puzzles=0.5", "unknown task kind 'puzzles'"},
      {"compositional:easy", "has no '='"},
      {"compositional:easy=lots", "must be a number in [0, 1]"},
      {"compositional:easy=-0.1", "must be a number in [0, 1]"},
      {"compositional:easy=1.5", "must be a number in [0, 1]"},
      {"compositional:easy=0.3,", "an empty item"},
      {"compositional:easy=0.3,compositional=0.2", "given twice"},
  };
  for (const auto& [text, says] : bad) {
    auto result = parse_env_fractions(text);
    INFO(text);
    REQUIRE_FALSE(result);
    CHECK_THAT(result.error().message, Catch::Contains(says));
  }
  BatcherOptions options = budget_of(200);
  options.max_seq_len = 384;
  CHECK_THAT(options.validate(), Catch::Contains("below the policy's max_seq_len (384)"));
  options.token_budget = 384;
  CHECK(options.validate().empty());
  options.spill_wait_s = -1.0;
  CHECK_THAT(options.validate(), Catch::Contains("spill wait"));
}
