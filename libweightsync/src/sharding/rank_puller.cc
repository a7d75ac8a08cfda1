// RankPuller (weightsync/rank_puller.h): an engine rank's buffers registered
// once, its plans bound to them and checked against their sizes, a new plan
// staged by any thread and taken by the next pull that starts.
#include "weightsync/rank_puller.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

namespace weightsync {

namespace {

Status invalid(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "rank puller: " + why);
}

// Whether every byte engine rank g's reads write lies inside the buffer of
// their destination tensor (by name: a read past one buffer's end must not
// land in another that happens to follow it).
Status check_reads_fit(const RoutingPlan& plan, std::size_t g,
                       const std::unordered_map<std::string, const ScatterEntry*>& buffers) {
  for (std::size_t r = 0; r < plan.trainer_ranks(); ++r) {
    for (const PlannedRead& read : plan.reads(g, r)) {
      auto buffer = buffers.find(read.dest);
      if (buffer == buffers.end()) {
        return invalid("the plan reads into destination tensor '" + read.dest +
                       "', which is not one of the buffers; pass every destination tensor of the rank");
      }
      const std::uint64_t stride = read.dest_stride == 0 ? read.length : read.dest_stride;
      std::uint64_t end = 0;  // past the last byte written
      const bool fits = read.count >= 1 && !__builtin_mul_overflow(read.count - 1, stride, &end) &&
                        !__builtin_add_overflow(end, read.length, &end) &&
                        !__builtin_add_overflow(end, read.dest_offset, &end) && end <= buffer->second->bytes;
      if (!fits) {
        return invalid("the plan writes past the end of destination tensor '" + read.dest + "' (" +
                       std::to_string(buffer->second->bytes) + " bytes) reading '" + read.source +
                       "' from trainer rank " + std::to_string(r) +
                       "; give buffers of the plan's destination shapes");
      }
    }
  }
  return Status();
}

}  // namespace

RankPuller::RankPuller(std::unique_ptr<SubscriberGroup> group, std::size_t engine_rank,
                       std::vector<ScatterEntry> buffers, MemoryKind kind)
    : group_(std::move(group)),
      trainer_ranks_(group_->size()),
      engine_rank_(engine_rank),
      buffers_(std::move(buffers)),
      kind_(kind) {}

RankPuller::~RankPuller() = default;

Result<std::vector<Destination>> RankPuller::bind_checked(const RoutingPlan& plan) const {
  if (plan.trainer_ranks() != trainer_ranks_) {
    return invalid("the plan has " + std::to_string(plan.trainer_ranks()) + " trainer ranks but the group " +
                   std::to_string(trainer_ranks_) + " members; plan for the group's trainer ranks");
  }
  if (engine_rank_ >= plan.engine_ranks()) {
    return invalid("the plan has no engine rank " + std::to_string(engine_rank_) + " (it has " +
                   std::to_string(plan.engine_ranks()) + ")");
  }
  std::unordered_map<std::string, void*> by_name;
  std::unordered_map<std::string, const ScatterEntry*> entries;
  for (const ScatterEntry& buffer : buffers_) {
    by_name.emplace(buffer.name, buffer.data);
    entries.emplace(buffer.name, &buffer);
  }
  Status fits = check_reads_fit(plan, engine_rank_, entries);
  if (!fits.ok()) return fits;
  auto destinations = plan.bind(engine_rank_, by_name, kind_);
  if (!destinations.ok()) return destinations.status();
  return destinations;
}

Result<std::unique_ptr<RankPuller>> RankPuller::create(std::unique_ptr<SubscriberGroup> group,
                                                       std::size_t engine_rank,
                                                       std::vector<ScatterEntry> buffers,
                                                       const RoutingPlan& plan, MemoryKind kind) try {
  if (group == nullptr) return invalid("create: no group; pass SubscriberGroup::connect()'s");
  std::unordered_set<std::string> names;
  for (const ScatterEntry& buffer : buffers) {
    if (buffer.data == nullptr || buffer.bytes == 0) {
      return invalid("create: destination tensor '" + buffer.name +
                     "' has no memory; give its base and bytes");
    }
    if (!names.insert(buffer.name).second) {
      return invalid("create: destination tensor '" + buffer.name + "' is listed twice");
    }
  }
  std::unique_ptr<RankPuller> puller(new RankPuller(std::move(group), engine_rank, std::move(buffers), kind));
  auto destinations = puller->bind_checked(plan);
  if (!destinations.ok()) return destinations.status();
  for (std::size_t r = 0; r < puller->group_->size(); ++r) {
    for (const ScatterEntry& buffer : puller->buffers_) {
      Status registered = puller->group_->member(r).register_memory(buffer.data, buffer.bytes);
      if (!registered.ok()) return registered;
    }
  }
  auto plans = puller->group_->prepare(*destinations);
  if (!plans.ok()) return plans.status();
  puller->plans_ = std::move(plans).value();
  puller->plan_id_ = puller->next_id_++;
  return puller;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("RankPuller::create: ") + e.what());
}

Result<std::uint64_t> RankPuller::replan(const RoutingPlan& plan) try {
  auto destinations = bind_checked(plan);
  if (!destinations.ok()) return destinations.status();
  std::lock_guard<std::mutex> lock(mu_);
  staged_ = Staged{next_id_++, std::move(destinations).value()};
  return staged_->id;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("RankPuller::replan: ") + e.what());
}

Result<RankPullResult> RankPuller::pull(const GroupPullOptions& options) try {
  std::optional<Staged> staged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    staged.swap(staged_);
  }
  if (staged) {  // between pulls: this pull is the first in the new placement
    auto plans = group_->prepare(staged->destinations);
    if (!plans.ok()) return plans.status();
    plans_ = std::move(plans).value();
    plan_id_ = staged->id;
  }
  const std::uint64_t id = plan_id_;
  ++pulls_started_;
  auto pulled = group_->pull(plans_, options);
  if (!pulled.ok()) return pulled.status();
  return RankPullResult{id, std::move(pulled).value()};
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("RankPuller::pull: ") + e.what());
}

}  // namespace weightsync
