// algorithms/token_budget_batcher.cc: see token_budget_batcher.h.
#include "algorithms/token_budget_batcher.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include "rollout/demonstrations.h"

namespace algorithms {
namespace {

std::string trimmed(const std::string& text) {
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const std::size_t last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

// Tolerance of the fractions' sum (0.1 + 0.2 + 0.7 is 1.0000000000000002).
constexpr double kSumSlack = 1e-9;

struct Cursor {
  const EnvironmentSupply* supply = nullptr;  // null: named, not supplied
  std::size_t next = 0;                       // the newest group not yet taken or skipped
  std::vector<bool> taken;
};

}  // namespace

std::string BatcherOptions::validate() const {
  if (token_budget > 0 && max_seq_len > 0 && token_budget < max_seq_len)
    return "the token budget (" + std::to_string(token_budget) + ") is below the policy's max_seq_len (" +
           std::to_string(max_seq_len) + "): a full-length trajectory would never fit";
  if (!(spill_wait_s >= 0.0) || !std::isfinite(spill_wait_s))
    return "the spill wait must be a number of seconds >= 0";
  double sum = 0.0;
  for (const auto& [name, fraction] : fractions) {
    if (!(fraction >= 0.0 && fraction <= 1.0)) return "the fraction of " + name + " is not in [0, 1]";
    sum += fraction;
  }
  if (sum > 1.0 + kSumSlack) return "the fractions sum to " + std::to_string(sum) + ", more than 1";
  return "";
}

bool BatchPlan::any_short() const {
  for (const EnvironmentPlan& e : environments) {
    if (e.short_of_share) return true;
  }
  return false;
}

bool BatchPlan::can_spill() const {
  bool other_has_tokens = false;
  for (const EnvironmentPlan& e : environments) {
    if (!e.short_of_share && e.tokens > 0) other_has_tokens = true;
  }
  return any_short() && other_has_tokens;
}

const EnvironmentPlan* BatchPlan::find(const std::string& name) const {
  for (const EnvironmentPlan& e : environments) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

BatchPlan plan_batch(const std::vector<EnvironmentSupply>& supply, const BatcherOptions& options) {
  BatchPlan plan;
  std::vector<Cursor> cursors;
  std::set<std::string> supplied;
  for (const EnvironmentSupply& s : supply) {
    supplied.insert(s.name);
    cursors.push_back(Cursor{&s, 0, std::vector<bool>(s.group_tokens.size(), false)});
    plan.environments.push_back(EnvironmentPlan{s.name});
  }
  for (const auto& [name, fraction] : options.fractions) {
    if (supplied.count(name) > 0) continue;
    cursors.push_back(Cursor{});
    plan.environments.push_back(EnvironmentPlan{name});
  }
  const std::uint64_t budget = options.token_budget;
  for (EnvironmentPlan& e : plan.environments) {
    if (options.fractions.empty()) {
      e.share = supply.empty() ? 0.0 : 1.0 / static_cast<double>(supply.size());
    } else {
      auto it = options.fractions.find(e.name);
      e.share = it == options.fractions.end() ? 0.0 : it->second;
    }
    e.quota = static_cast<std::uint64_t>(std::floor(e.share * static_cast<double>(budget)));
  }

  std::uint64_t left = budget;
  for (;;) {
    std::size_t best = cursors.size();
    double best_deficit = 0.0;
    for (std::size_t i = 0; i < cursors.size(); ++i) {
      Cursor& c = cursors[i];
      if (c.supply == nullptr) continue;
      const std::vector<std::uint64_t>& groups = c.supply->group_tokens;
      while (c.next < groups.size() && groups[c.next] > left) ++c.next;  // does not fit: skipped for good
      if (c.next >= groups.size()) continue;
      const EnvironmentPlan& e = plan.environments[i];
      const double deficit = e.share * static_cast<double>(plan.tokens) - static_cast<double>(e.tokens);
      if (best == cursors.size() || deficit > best_deficit ||
          (deficit == best_deficit && e.share > plan.environments[best].share)) {
        best = i;
        best_deficit = deficit;
      }
    }
    if (best == cursors.size()) break;
    Cursor& c = cursors[best];
    const std::uint64_t tokens = c.supply->group_tokens[c.next];
    EnvironmentPlan& e = plan.environments[best];
    plan.picks.push_back(Pick{e.name, c.next, tokens});
    c.taken[c.next] = true;
    ++c.next;
    e.tokens += tokens;
    ++e.groups;
    plan.tokens += tokens;
    left -= tokens;
  }

  for (std::size_t i = 0; i < cursors.size(); ++i) {
    EnvironmentPlan& e = plan.environments[i];
    const Cursor& c = cursors[i];
    const std::size_t queued = c.supply == nullptr ? 0 : c.supply->group_tokens.size();
    e.left = queued - e.groups;
    const std::uint64_t next = c.supply == nullptr ? 0 : c.supply->next_group_tokens;
    e.short_of_share = e.share > 0.0 && e.left == 0 && e.quota > e.tokens &&
                       e.quota - e.tokens >= std::max<std::uint64_t>(next, 1);
  }
  return plan;
}

bool SpillWait::ready(const BatchPlan& plan, double now) {
  if (plan.tokens == 0) return false;
  if (!plan.any_short()) return true;
  if (!started_ && plan.can_spill()) {
    started_ = true;
    deadline_ = now + wait_s_;
  }
  if (started_ && now >= deadline_) {
    spilled_ = true;
    return true;
  }
  return false;
}

zorplex::Result<std::string> canonical_environment(const std::string& name) {
  auto mix = rollout::parse_task_mix(name);
  if (!mix) return mix.error();
  return rollout::task_mix_name(mix.value());
}

zorplex::Result<std::map<std::string, double>> parse_env_fractions(const std::string& text) {
  std::map<std::string, double> fractions;
  if (trimmed(text).empty()) return fractions;
  double sum = 0.0;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item =
        trimmed(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) return zorplex::Error{"an empty item in '" + text + "' (expected NAME=FRACTION,...)"};
    const std::size_t equals = item.find('=');
    if (equals == std::string::npos)
      return zorplex::Error{"'" + item +
                            "' has no '=' (expected NAME=FRACTION, e.g. compositional:easy=0.3)"};
    auto name = canonical_environment(trimmed(item.substr(0, equals)));
    if (!name) return zorplex::Error{"'" + item + "': " + name.error().message};
    const std::string number = trimmed(item.substr(equals + 1));
    char* end = nullptr;
    const double fraction = number.empty() ? std::nan("") : std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !(fraction >= 0.0 && fraction <= 1.0))
      return zorplex::Error{"'" + item + "': the fraction must be a number in [0, 1]"};
    if (!fractions.emplace(name.value(), fraction).second)
      return zorplex::Error{"'" + item + "': " + name.value() + " is given twice"};
    sum += fraction;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (sum > 1.0 + kSumSlack)
    return zorplex::Error{"the fractions in '" + text + "' sum to " + std::to_string(sum) + ", more than 1"};
  return fractions;
}

}  // namespace algorithms
