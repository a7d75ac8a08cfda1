// weightsync/rank_puller.h: one engine rank's pulls under a routing plan that
// can be replaced between pulls (re-planning: an expert-parallel engine
// rebalances its experts, EPLB; docs/sharding.md, "Expert maps and
// re-planning").
//
// An engine rank keeps its destination tensors (the same buffers, registered
// once) and its SubscriberGroup (the same connections) for its whole life; a
// new RoutingPlan only changes which bytes land where. replan() binds the new
// plan to those buffers and stages it; the next pull() that starts afterwards
// prepares it and pulls with it. A pull already running keeps the plan it
// started with, so it finishes in the old placement; pull() results say which
// plan each pull used.
//
// Contract
// - create() takes the group (one member per trainer rank, rank order), this
//   engine rank's index in the plan, every destination tensor of this rank as
//   {name, base, bytes} (ScatterEntry: the buffers stay allocated and at the
//   same addresses while the puller lives), and the first plan. It registers
//   each buffer once with every member (Subscriber::register_memory: a no-op
//   on tcp and shm), so that no plan's reads register memory again.
// - Every plan (the first and each replan()) is checked before use: the plan
//   has this engine rank and as many trainer ranks as the group has members,
//   every destination tensor it reads into is one of the buffers, and every
//   byte it writes lies inside that buffer (kInvalidArgument otherwise; the
//   plan in force stays). A plan is refused, never clipped.
// - replan() may be called from any thread, also while pull() runs on
//   another; it returns the new plan's id (ids grow from 1, the first plan's).
//   A plan staged but not yet pulled with is replaced by a newer replan().
//   pull() is called by one thread at a time (the group's rule). If preparing
//   the staged plan fails (a connection error, a view the publisher refuses),
//   pull() returns that error, drops the staged plan and keeps the old one.
// - With checksums on, each distinct plan registers one view per trainer
//   rank with its publisher, which keeps at most 16 per subscriber: a puller
//   that went through more distinct plans than that is refused
//   (kInvalidArgument) and must be created again over a new group.
// - Errors are those of SubscriberGroup::pull(); on failure the buffers'
//   bytes are undefined (as for any pull).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "weightsync/sharding.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"
#include "weightsync/subscriber_group.h"

namespace weightsync {

struct RankPullResult {
  std::uint64_t plan = 0;  // the id of the plan this pull landed in
  GroupPullResult group;
};

class RankPuller {
 public:
  static Result<std::unique_ptr<RankPuller>> create(std::unique_ptr<SubscriberGroup> group,
                                                    std::size_t engine_rank,
                                                    std::vector<ScatterEntry> buffers,
                                                    const RoutingPlan& plan,
                                                    MemoryKind kind = MemoryKind::kHost);
  ~RankPuller();
  RankPuller(const RankPuller&) = delete;
  RankPuller& operator=(const RankPuller&) = delete;

  // Checks and stages `plan` for the next pull to start; its id.
  Result<std::uint64_t> replan(const RoutingPlan& plan);
  // One complete version into the buffers, under the newest staged plan (if
  // any was staged since the last pull started) or the one in force.
  Result<RankPullResult> pull(const GroupPullOptions& options = {});

  // The id of the plan in force (the last pull's, or the first plan's).
  std::uint64_t plan() const noexcept { return plan_id_.load(); }
  // Pulls started so far (each took its plan when it started).
  std::uint64_t pulls_started() const noexcept { return pulls_started_.load(); }
  SubscriberGroup& group() noexcept { return *group_; }

 private:
  struct Staged {
    std::uint64_t id = 0;
    std::vector<Destination> destinations;
  };
  RankPuller(std::unique_ptr<SubscriberGroup> group, std::size_t engine_rank,
             std::vector<ScatterEntry> buffers, MemoryKind kind);
  // The plan bound to the buffers, or why it does not fit them.
  Result<std::vector<Destination>> bind_checked(const RoutingPlan& plan) const;

  std::unique_ptr<SubscriberGroup> group_;
  const std::size_t trainer_ranks_;  // group_->size(), read by replan() without touching the group
  const std::size_t engine_rank_;
  const std::vector<ScatterEntry> buffers_;
  const MemoryKind kind_;
  std::vector<PullPlan> plans_;  // in force; the pulling thread's
  std::atomic<std::uint64_t> plan_id_{0};
  std::atomic<std::uint64_t> pulls_started_{0};
  std::mutex mu_;  // guards staged_ and next_id_
  std::optional<Staged> staged_;
  std::uint64_t next_id_ = 1;
};

}  // namespace weightsync
