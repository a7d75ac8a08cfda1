// PullSource: what a StagedUpdates pulls from: one Subscriber (a trainer, a
// relay) or a SubscriberGroup (every rank of a sharded trainer, one version
// across them all). Each member of the source has its own layout and its own
// staging area; a pull fills every member's plan with one version.
//
// Contract: owned by a StagedUpdates and called only from its background
// thread, except the accessors of what connect learned (layout, members,
// transport, checksums, deltas), which never change and may be read from any
// thread. Errors are those of Subscriber::pull and SubscriberGroup::pull.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/cancel.h"
#include "weightsync/subscriber.h"
#include "weightsync/subscriber_group.h"

namespace weightsync::detail {

struct SourcePull {
  std::optional<std::uint64_t> newer_than;
  std::optional<std::uint64_t> version;  // exactly this one
  std::chrono::milliseconds wait{0};
  const CancelToken* cancel = nullptr;
  std::optional<std::uint64_t> delta_base;                        // one Subscriber only
  std::function<void(std::uint64_t, std::uint64_t)> on_progress;  // one Subscriber only
};

class PullSource {
 public:
  virtual ~PullSource() = default;
  virtual std::size_t members() const = 0;
  virtual bool is_group() const = 0;
  virtual const WeightLayout& layout(std::size_t member) const = 0;
  virtual std::string transport() const = 0;
  virtual bool checksums() const = 0;  // every member's publisher computes them
  virtual bool deltas() const = 0;     // delta chains can be asked for
  virtual Result<PullPlan> prepare(std::size_t member, const Destination& destination) = 0;
  // One version into every member's plan; the result sums the members'.
  virtual Result<PullResult> pull(const std::vector<PullPlan>& plans, const SourcePull& request) = 0;
  virtual Status status() const = 0;
  virtual SubscriberStats stats() const = 0;
};

std::unique_ptr<PullSource> subscriber_source(std::unique_ptr<Subscriber> subscriber);
std::unique_ptr<PullSource> group_source(std::unique_ptr<SubscriberGroup> group);

}  // namespace weightsync::detail
