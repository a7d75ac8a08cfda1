// algorithms/token_budget_batcher.h: Marin's v0 batcher (seed 001): a
// step's batch as a token budget shared out among environments by target
// fractions, round-robin by token deficit, newest groups first, whole groups
// only.
//
// Contract
// - An environment is the task kind and difficulty a group was sampled on,
//   spelled as the generator's --task flag spells it ("compositional:easy",
//   "compositional:medium", "simple", ...; rollout::task_mix_name).
//   canonical_environment() maps any spelling --task accepts to that one
//   ("compositional" -> "compositional:easy", "simple:hard" -> "simple").
// - plan_batch(supply, options) plans, and consumes nothing: supply lists
//   each environment's queued groups (their tokens, newest first) and
//   what its next group is expected to hold. Each environment's share is
//   options.fractions[name] (0 for one not named; an environment named and
//   not supplied is planned with no groups), or, with no fractions, 1/k of
//   the k environments supplied. Its quota is floor(share x token_budget).
//   Then, until no environment has a group that fits the budget left: the
//   environment furthest below its share of the tokens taken so far
//   (share x taken - its own taken; ties: the larger share, then supply
//   order) takes its newest group not yet taken that fits; groups that do
//   not fit are skipped for good (the budget only shrinks). So the budget is
//   never exceeded, whole groups only, and with enough supply each
//   environment ends within one group of its share; a remainder (fractions
//   summing to less than 1) is spread over the environments that have groups.
// - An environment is short of its share when it has a share, every queued
//   group of it was taken, and its quota less its tokens still holds its
//   expected next group (any one, when that is unknown): more groups of it
//   would be taken. The trainer waits for a short environment (the spill
//   wait) only while another environment already has tokens in the plan
//   (can_spill(): the bottleneck is that environment, not generation as a
//   whole); then trains on the plan, in which the others filled what they
//   could, and reports the short environment's shortfall as spilled.
// - SpillWait, once per async step: ready(plan, now) is false while the plan
//   is empty; true once no environment is short; otherwise the wait starts
//   at the first plan that can_spill() and ready() turns true wait_s later
//   (spilled() then says so). Before that (every environment short: the
//   generators are the bottleneck) it waits, as the group-count batch does.
//   now is seconds on any steady clock.
// - parse_env_fractions("compositional:easy=0.3,compositional:medium=0.7"):
//   canonical names to fractions. Refused, with an Error naming the item:
//   an empty item, no '=', an unknown environment, a name given twice, a
//   fraction that is not a number in [0, 1], fractions summing to more than
//   1. "" is no fractions (equal shares).
// - BatcherOptions::validate(): "" or what is wrong (the budget below
//   max_seq_len, a negative spill wait, a fraction out of range).
// - The functions are pure, any thread; a SpillWait belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "zorplex/result.h"

namespace algorithms {

struct EnvironmentSupply {
  std::string name;
  std::vector<std::uint64_t> group_tokens;  // its queued groups' tokens, newest first
  std::uint64_t next_group_tokens = 0;      // its newest arrival's tokens; 0: none seen yet
};

struct BatcherOptions {
  std::uint64_t token_budget = 0;           // tokens per step; 0: off (batches by group count)
  std::map<std::string, double> fractions;  // canonical names; empty: equal shares
  std::uint64_t max_seq_len = 0;            // one trajectory's most tokens (0: no cap)
  double spill_wait_s = 5.0;                // how long a step waits for a short environment

  std::string validate() const;
};

struct Pick {
  std::string environment;
  std::size_t index = 0;  // into its EnvironmentSupply::group_tokens (0: newest)
  std::uint64_t tokens = 0;
};

struct EnvironmentPlan {
  std::string name;
  double share = 0.0;
  std::uint64_t quota = 0;   // floor(share x token_budget)
  std::uint64_t tokens = 0;  // taken
  std::size_t groups = 0;    // taken
  std::size_t left = 0;      // queued and not taken
  bool short_of_share = false;

  std::uint64_t shortfall() const { return short_of_share && quota > tokens ? quota - tokens : 0; }
};

struct BatchPlan {
  std::vector<Pick> picks;                    // in the order taken
  std::vector<EnvironmentPlan> environments;  // supply order, then named ones not supplied
  std::uint64_t tokens = 0;

  bool any_short() const;
  // Some environment is short while another has tokens in the plan.
  bool can_spill() const;
  const EnvironmentPlan* find(const std::string& name) const;
};

BatchPlan plan_batch(const std::vector<EnvironmentSupply>& supply, const BatcherOptions& options);

class SpillWait {
 public:
  explicit SpillWait(double wait_s) : wait_s_(wait_s) {}
  bool ready(const BatchPlan& plan, double now);
  bool spilled() const { return spilled_; }
  bool waiting() const { return started_; }  // the spill wait has started

 private:
  double wait_s_;
  bool started_ = false;
  double deadline_ = 0.0;
  bool spilled_ = false;
};

zorplex::Result<std::string> canonical_environment(const std::string& name);
zorplex::Result<std::map<std::string, double>> parse_env_fractions(const std::string& text);

}  // namespace algorithms
