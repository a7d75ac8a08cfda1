// SubscriberGroup: the newest complete version, pulled exactly from every
// trainer rank, concurrently (docs/consistency.md, "Across ranks").
#include "weightsync/subscriber_group.h"

#include <algorithm>
#include <future>
#include <optional>

#include "common/deadline.h"
#include "common/log.h"

namespace weightsync {
namespace {

using Clock = std::chrono::steady_clock;

Status with_rank(const Status& s, std::size_t rank) {
  return Status(s.code(), "trainer rank " + std::to_string(rank) + ": " + s.message());
}

using Members = std::vector<std::unique_ptr<Subscriber>>;
using RoundResults = std::vector<std::optional<Result<PullResult>>>;

// Step 2 of a round: every working rank pulls exactly `target`, concurrently
// when asked to.
RoundResults pull_every_rank(const Members& members, const std::vector<PullPlan>& plans,
                             const std::vector<std::size_t>& working, std::uint64_t target, bool parallel) {
  RoundResults results(plans.size());
  auto pull_member = [&](std::size_t r) {
    PullOptions member_options;
    member_options.version = target;
    results[r] = members[r]->pull(plans[r], member_options);
  };
  if (parallel && working.size() > 1) {
    std::vector<std::future<void>> others;
    for (std::size_t i = 1; i < working.size(); ++i) {
      others.push_back(std::async(std::launch::async, pull_member, working[i]));
    }
    pull_member(working[0]);
    for (auto& f : others) f.get();
  } else {
    for (std::size_t r : working) pull_member(r);
  }
  return results;
}

// Step 3 of a round: every rank delivered `target`; or a rank has not
// committed it yet (an exact pull waits for it); or a rank moved past it
// (start again past `floor_next`); or an error to return.
struct RoundVerdict {
  bool not_yet = false;
  bool moved_on = false;
  std::string moved_on_why;
  // The next round starts past `floor_next`: a rank that moved on had
  // committed `latest`, and its ring of N slots holds at most its N newest
  // (a version kept by another reader's lease aside), the oldest of them
  // the next to go. So the next version must be one of its N - 1 newest.
  std::uint64_t floor_next = 0;
};

Result<RoundVerdict> judge_round(const Members& members, const RoundResults& results,
                                 const std::vector<std::size_t>& working, bool exact, std::uint64_t target) {
  RoundVerdict verdict;
  verdict.floor_next = target;
  for (std::size_t r : working) {
    const Result<PullResult>& got = *results[r];
    if (got.ok()) continue;
    const ErrorCode code = got.status().code();
    if (exact && code == ErrorCode::kNotReady) {
      verdict.not_yet = true;  // a rank has not committed it yet: wait, as for any lagging rank
      continue;
    }
    if (!exact && (code == ErrorCode::kVersionRevoked || code == ErrorCode::kNotReady)) {
      verdict.moved_on = true;
      verdict.moved_on_why = with_rank(got.status(), r).message();
      auto latest = members[r]->latest_version();
      if (!latest.ok()) return with_rank(latest.status(), r);
      const std::uint64_t slots = members[r]->slot_count();
      if (slots > 0 && *latest >= slots)
        verdict.floor_next = std::max(verdict.floor_next, *latest - (slots - 1));
      continue;
    }
    return with_rank(got.status(), r);
  }
  return verdict;
}

// Every working rank delivered `target`: the group's result.
void collect_round(GroupPullResult& out, const RoundResults& results, const std::vector<std::size_t>& working,
                   std::uint64_t target) {
  out.version = target;
  out.checksums_verified = !working.empty();
  out.members.assign(results.size(), PullResult{});
  for (std::size_t r : working) {
    const PullResult& got = **results[r];
    out.members[r] = got;
    out.bytes += got.bytes;
    out.checksums_verified = out.checksums_verified && got.checksum_verified;
  }
}

}  // namespace

SubscriberGroup::SubscriberGroup(std::vector<std::unique_ptr<Subscriber>> members)
    : members_(std::move(members)) {}
SubscriberGroup::~SubscriberGroup() = default;

Result<std::unique_ptr<SubscriberGroup>> SubscriberGroup::connect(const std::vector<std::string>& addresses,
                                                                  SubscriberOptions options) try {
  if (addresses.empty())
    return Status(ErrorCode::kInvalidArgument, "a SubscriberGroup needs at least one rank");
  std::vector<std::unique_ptr<Subscriber>> members;
  for (std::size_t r = 0; r < addresses.size(); ++r) {
    SubscriberOptions member_options = options;
    member_options.client_name = options.client_name + "/rank" + std::to_string(r);
    auto sub = Subscriber::connect(addresses[r], member_options);
    if (!sub.ok()) return with_rank(sub.status(), r);
    members.push_back(std::move(*sub));
  }
  return adopt(std::move(members));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SubscriberGroup::connect: ") + e.what());
}

Result<std::unique_ptr<SubscriberGroup>> SubscriberGroup::adopt(
    std::vector<std::unique_ptr<Subscriber>> members) {
  if (members.empty())
    return Status(ErrorCode::kInvalidArgument, "a SubscriberGroup needs at least one rank");
  for (std::size_t r = 0; r < members.size(); ++r) {
    if (!members[r])
      return Status(ErrorCode::kInvalidArgument, "rank " + std::to_string(r) + " has no Subscriber");
  }
  return std::unique_ptr<SubscriberGroup>(new SubscriberGroup(std::move(members)));
}

std::size_t SubscriberGroup::size() const noexcept {
  return members_.size();
}

Subscriber& SubscriberGroup::member(std::size_t rank) {
  return *members_.at(rank);
}

std::uint64_t SubscriberGroup::held_version() const noexcept {
  return held_version_;
}

Status SubscriberGroup::status() const {
  for (std::size_t r = 0; r < members_.size(); ++r) {
    Status s = members_[r]->status();
    if (!s.ok()) return with_rank(s, r);
  }
  return Status();
}

SubscriberStats SubscriberGroup::stats() const {
  SubscriberStats sum;
  for (const auto& m : members_) {
    const SubscriberStats s = m->stats();
    sum.pulls += s.pulls;
    sum.retries += s.retries;
    sum.bytes += s.bytes;
    sum.registrations += s.registrations;
    sum.staged_pulls += s.staged_pulls;
    sum.streamed_pulls += s.streamed_pulls;
    sum.registrations_released += s.registrations_released;
    sum.views += s.views;
    for (std::size_t b = 0; b < kPullSecondsBuckets; ++b)
      sum.pull_seconds_counts[b] += s.pull_seconds_counts[b];
    sum.pull_seconds_sum += s.pull_seconds_sum;
  }
  return sum;
}

Result<std::uint64_t> SubscriberGroup::latest_complete_version() try {
  std::uint64_t complete = UINT64_MAX;
  for (std::size_t r = 0; r < members_.size(); ++r) {
    auto latest = members_[r]->latest_version();
    if (!latest.ok()) return with_rank(latest.status(), r);
    complete = std::min(complete, *latest);
  }
  return complete;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SubscriberGroup::latest_complete_version: ") + e.what());
}

Result<std::uint64_t> SubscriberGroup::wait_for_complete_version(std::uint64_t newer_than,
                                                                 std::chrono::milliseconds timeout) try {
  const auto until = detail::wait_end(Clock::now(), timeout);
  // Wait on each rank in turn: once rank r is past newer_than it stays past.
  for (std::size_t r = 0; r < members_.size(); ++r) {
    auto latest = members_[r]->latest_version();
    if (!latest.ok()) return with_rank(latest.status(), r);
    if (*latest > newer_than) continue;
    const auto now = Clock::now();
    if (now >= until) {
      return Status(ErrorCode::kTimeout, "no version newer than " + std::to_string(newer_than) +
                                             " is complete: trainer rank " + std::to_string(r) +
                                             " has only " + std::to_string(*latest));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::min<Clock::duration>(until - now, std::chrono::minutes(10)));
    auto reached = members_[r]->wait_for_version(newer_than, std::max(left, std::chrono::milliseconds(1)));
    if (!reached.ok()) return with_rank(reached.status(), r);
    if (Clock::now() >= until && r + 1 < members_.size()) {
      // Deadline spent on this rank: the others are checked without waiting.
      continue;
    }
  }
  return latest_complete_version();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SubscriberGroup::wait_for_complete_version: ") + e.what());
}

Result<std::vector<PullPlan>> SubscriberGroup::prepare(const std::vector<Destination>& destinations) try {
  if (destinations.size() != members_.size()) {
    return Status(ErrorCode::kInvalidArgument, "a group pull needs one destination per rank (" +
                                                   std::to_string(members_.size()) + "), got " +
                                                   std::to_string(destinations.size()));
  }
  std::vector<PullPlan> plans(members_.size());
  for (std::size_t r = 0; r < members_.size(); ++r) {
    const Destination& d = destinations[r];
    if (d.is_partial() && d.tensor_slices().empty()) continue;  // nothing from this rank
    auto plan = members_[r]->prepare(d);
    if (!plan.ok()) return with_rank(plan.status(), r);
    plans[r] = std::move(*plan);
  }
  return plans;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SubscriberGroup::prepare: ") + e.what());
}

Result<GroupPullResult> SubscriberGroup::pull(const std::vector<Destination>& destinations,
                                              const GroupPullOptions& options) {
  auto plans = prepare(destinations);
  if (!plans.ok()) return plans.status();
  return pull(*plans, options);
}

Result<GroupPullResult> SubscriberGroup::pull(const std::vector<PullPlan>& plans,
                                              const GroupPullOptions& options) try {
  if (plans.size() != members_.size()) {
    return Status(ErrorCode::kInvalidArgument, "a group pull needs one plan per rank (" +
                                                   std::to_string(members_.size()) + "), got " +
                                                   std::to_string(plans.size()));
  }
  if (Status s = status(); !s.ok()) return s;
  const auto start = Clock::now();
  const auto until = detail::wait_end(start, options.wait);
  const bool exact = options.version.has_value();
  const std::uint64_t newer_than = exact ? *options.version - 1 : options.newer_than.value_or(held_version_);
  if (exact && *options.version == 0)
    return Status(ErrorCode::kInvalidArgument, "version 0 is never published");
  std::vector<std::size_t> working;
  for (std::size_t r = 0; r < plans.size(); ++r) {
    if (plans[r].valid()) working.push_back(r);
  }
  GroupPullResult out;
  Clock::duration waited{0};
  // After a round a rank could not serve, only a newer complete version helps.
  std::uint64_t floor = newer_than;
  std::string moved_on_why;
  for (bool first = true;; first = false) {
    // 1. The version to pull: the newest complete one, or the one asked for
    // (tried at once: no round trip to learn it; a rank without it says kNotReady).
    Result<std::uint64_t> complete = exact && first ? *options.version : latest_complete_version();
    if (!complete.ok()) return complete.status();
    if (*complete <= floor) {
      const auto now = Clock::now();
      if (now >= until) {
        if (!moved_on_why.empty()) {
          return Status(ErrorCode::kVersionRevoked, moved_on_why +
                                                        ", and no newer version is complete yet (" +
                                                        "are the ranks more than a ring apart?)");
        }
        return Status(ErrorCode::kNotReady, (exact ? "version " + std::to_string(*options.version)
                                                   : "no version newer than " + std::to_string(newer_than)) +
                                                " is complete on every trainer rank yet (complete: " +
                                                std::to_string(*complete) + ")");
      }
      auto reached = wait_for_complete_version(
          floor, std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::min<Clock::duration>(until - now, std::chrono::minutes(10))));
      waited += Clock::now() - now;
      if (!reached.ok() && reached.status().code() != ErrorCode::kTimeout) return reached.status();
      continue;
    }
    const std::uint64_t target = exact ? *options.version : *complete;
    // 2. Every member pulls exactly `target`, concurrently.
    const RoundResults results = pull_every_rank(members_, plans, working, target, options.parallel);
    // 3. All of them, or start again, or fail.
    auto verdict = judge_round(members_, results, working, exact, target);
    if (!verdict.ok()) return verdict.status();
    if (verdict->not_yet && !verdict->moved_on) {
      if (Clock::now() >= until) {
        return Status(ErrorCode::kNotReady,
                      "version " + std::to_string(target) + " is not committed on every trainer rank yet");
      }
      continue;  // the next round asks every rank again and waits for the laggard
    }
    if (verdict->moved_on) {
      moved_on_why = verdict->moved_on_why;
      if (static_cast<int>(out.rounds) >= options.max_rounds) {
        return Status(ErrorCode::kVersionRevoked,
                      "trainer ranks kept moving past the version being pulled (" +
                          std::to_string(out.rounds + 1) + " rounds)");
      }
      // A version a rank dropped never returns. Ranks in step: the newest
      // complete version is past `floor_next` already, and the next round
      // takes it at once. A rank a whole ring behind the others (descheduled,
      // then catching up in a burst) would cost a round per version it
      // publishes while the others are out of reach: wait instead until
      // every rank is past `floor_next`.
      WS_DEBUG("subscriber group: a rank no longer holds version {}; next: a complete version past {}",
               target, verdict->floor_next);
      ++out.rounds;
      floor = verdict->floor_next;
      continue;
    }
    collect_round(out, results, working, target);
    out.wait_seconds = std::chrono::duration<double>(waited).count();
    out.seconds = std::chrono::duration<double>(Clock::now() - start - waited).count();
    held_version_ = target;
    return out;
  }
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SubscriberGroup::pull: ") + e.what());
}

}  // namespace weightsync
