// weightsync/subscriber_group.h: one version from every rank of a sharded
// trainer (docs/consistency.md, "Across ranks"; docs/sharding.md).
//
// Contract
// - A trainer of R ranks runs R Publishers, one per rank, each publishing its
//   own shard as its own layout under the same version numbers. A
//   SubscriberGroup holds one Subscriber per rank, in rank order.
// - Version v is *complete* when every rank has committed it. The group's
//   latest complete version is the minimum over the ranks of their newest
//   committed version (versions only grow, so every rank has reached it).
// - pull() delivers one complete version v into every member's destination:
//   each member pulls exactly v (PullOptions::version). A rank behind the
//   others makes the group wait (up to GroupPullOptions::wait), never mix: a
//   rank's newer version is not taken until every rank has it. A rank that no
//   longer holds v (it ran a whole ring ahead while the others were read)
//   makes the group start again (counted in GroupPullResult::rounds, at most
//   max_rounds) at the newest complete version among that rank's N - 1
//   newest (N: its slot count; the oldest a ring holds is the next to go),
//   waiting for one if need be: a rank that fell a whole ring behind costs one
//   round, not one per version it publishes while catching up. On success every byte
//   delivered came from v, and each member's bytes were verified against its
//   rank's checksum where the rank computes them; on failure the
//   destinations' bytes are undefined.
// - Members with work are pulled concurrently, one thread each (the caller's
//   thread takes one), so the ranks' transfers overlap. A member whose
//   destination is empty (an engine rank that reads nothing from that trainer
//   rank) is not pulled.
// - Errors: the first failing member's error, its message naming the rank.
//   A member's connection error is sticky for the group (status()): create a
//   new group to reconnect.
// - Threads: one thread at a time, like a Subscriber.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/options.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"

namespace weightsync {

struct GroupPullOptions {
  // Deliver only a complete version newer than this. nullopt: held_version().
  std::optional<std::uint64_t> newer_than;
  // Deliver exactly this version (an engine whose ranks agreed on it, e.g.
  // rank 0's latest_complete_version()). kVersionRevoked if a rank no longer
  // holds it; newer_than is then ignored.
  std::optional<std::uint64_t> version;
  // How long to wait for such a version to be complete; 0: do not wait.
  std::chrono::milliseconds wait{0};
  // Rounds started again because a rank moved past the version being read
  // (each starts past the versions the rank that moved on can no longer
  // hold, so a round is lost only to a rank that moved a ring ahead during
  // a read).
  // Waiting for a lagging rank is not a round.
  int max_rounds = 64;
  // Pull the members concurrently (one thread each); false: one after another.
  bool parallel = true;
};

struct GroupPullResult {
  std::uint64_t version = 0;
  std::uint64_t bytes = 0;        // over all members
  std::uint32_t rounds = 0;       // rounds started again (a rank moved past the version)
  double seconds = 0.0;           // wall time of the pull, waiting excluded
  double wait_seconds = 0.0;      // time spent waiting for a complete version
  bool checksums_verified = false;  // every member with work verified its bytes
  std::vector<PullResult> members;  // per rank; version 0 for a member with nothing to pull
};

class SubscriberGroup {
 public:
  // Connects one Subscriber per address (rank order), each with `options`.
  static Result<std::unique_ptr<SubscriberGroup>> connect(const std::vector<std::string>& addresses,
                                                          SubscriberOptions options = {});
  // A group over Subscribers already connected (one per rank, rank order).
  static Result<std::unique_ptr<SubscriberGroup>> adopt(std::vector<std::unique_ptr<Subscriber>> members);
  ~SubscriberGroup();
  SubscriberGroup(const SubscriberGroup&) = delete;
  SubscriberGroup& operator=(const SubscriberGroup&) = delete;

  std::size_t size() const noexcept;
  Subscriber& member(std::size_t rank);

  // The newest version every rank has committed; 0 while any rank has none.
  Result<std::uint64_t> latest_complete_version();
  // Waits until the latest complete version is newer than `newer_than`;
  // returns it, or kTimeout.
  Result<std::uint64_t> wait_for_complete_version(std::uint64_t newer_than, std::chrono::milliseconds timeout);

  // One plan per member (Subscriber::prepare); an empty Destination::slices({})
  // gives an empty plan: that member is not pulled.
  Result<std::vector<PullPlan>> prepare(const std::vector<Destination>& destinations);
  Result<GroupPullResult> pull(const std::vector<PullPlan>& plans, const GroupPullOptions& options = {});
  Result<GroupPullResult> pull(const std::vector<Destination>& destinations, const GroupPullOptions& options = {});

  // The version last delivered by pull(); 0 before the first.
  std::uint64_t held_version() const noexcept;
  // OK, or the first member's sticky connection error.
  Status status() const;
  // The members' SubscriberStats summed (pulls count member pulls).
  SubscriberStats stats() const;

 private:
  explicit SubscriberGroup(std::vector<std::unique_ptr<Subscriber>> members);
  std::vector<std::unique_ptr<Subscriber>> members_;
  std::uint64_t held_version_ = 0;
};

}  // namespace weightsync
