// weightsync/staged_updates.h: updates that never stop generation. A
// background thread pulls the next version into a staging area the library
// owns while the engine keeps reading its live weights; the engine installs
// the staged version, verified and whole, at a moment it chooses
// (docs/consistency.md, "Staged updates").
//
// Contract
// - create() takes a connected Subscriber (to a trainer or a relay) and
//   allocates the staging area once, sized from the layout (or from the
//   slices of a partial update): host memory, or device memory of the current
//   device (StagedUpdatesOptions::memory). It prepares its pulls once
//   (Subscriber::prepare), so the steady loop registers and allocates nothing.
// - Install modes:
//   * kSwap: the library owns two buffers laid out like the layout (partial:
//     the slices packed in order, StagedUpdates::slice_offset). live_data() is
//     the one the engine reads; install() makes the staged buffer live and the
//     old live buffer the next staging area. The engine re-points its tensors
//     after each install (tensor(): the new addresses).
//   * kCopy: the engine's weights stay at fixed addresses
//     (StagedUpdatesOptions::live: contiguous, scatter or slices); install()
//     copies the staged bytes into them (one memcpy for a contiguous
//     destination; a device-to-device copy for kCuda memory).
// - install() makes live only a version the background pull delivered whole
//   and verified (the publisher's checksum, the trainer's signature, as the
//   Subscriber's options ask). Nothing staged (no newer version yet, a pull
//   still running, or the last pull failed): kNotReady, and the live weights
//   are untouched. A failed background pull never touches the live weights:
//   they keep holding the installed version, and the failure is counted
//   (StagedUpdatesStats::failed_pulls) and kept in last_failure().
// - The background thread pulls the newest version (or each version in turn,
//   every_version) newer than the one live, then waits, holding the staged
//   version, until it is installed. With deltas on and a publisher that
//   serves them, it asks for a chain from the version the staging buffer
//   holds (full host destinations only; any mismatch falls back to a full
//   pull, as Subscriber::pull does).
// - Sharded trainers: create() also takes a SubscriberGroup (one member per
//   trainer rank); each member gets its own buffers (MemberStaging), and one
//   version, complete on every trainer rank, is staged and installed for all
//   members at once (docs/consistency.md, "Across ranks").
// - Across engine ranks (pull_on_request): the background thread pulls only
//   the version stage() names; install(version) installs exactly it, and
//   discard() drops it. install_on_every_rank() runs that protocol over the
//   ranks of one process: every rank installs the version, or none does.
// - Errors: a connection error of the Subscriber (sticky there) stops the
//   background thread; status() returns it and install() keeps serving what
//   is live (kNotReady with that error in its message). Create a new
//   StagedUpdates on a new Subscriber to reconnect.
// - Threads: one background thread, the only one that calls the Subscriber.
//   install(), live_data(), tensor() and the accessors may be called from any
//   one thread at a time (the engine's); staged_version(), wait_staged(),
//   status() and stats() from any thread. The live buffer is the engine's to
//   read, never to write (deltas would fail their check and pull in full);
//   after install() returns in kSwap mode, the previous live buffer is the
//   library's again: stop reading it before calling install().
// - Ownership: owns the Subscriber and the buffers; the destructor stops the
//   background pull (cancelling a wait, finishing at most one transfer) and
//   joins its thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/memory.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"
#include "weightsync/subscriber_group.h"

namespace weightsync {

enum class InstallMode : std::uint8_t {
  kSwap = 0,  // the staged buffer becomes the live one (re-point the tensors)
  kCopy = 1,  // one copy into the engine's fixed addresses (CUDA graphs)
};

const char* to_string(InstallMode mode) noexcept;

// One trainer rank's part of a SubscriberGroup's update: the fields of the
// same names in StagedUpdatesOptions, for that member.
struct MemberStaging {
  std::optional<Destination> live;
  std::vector<TensorSlice> slices;
};

struct StagedUpdatesOptions {
  InstallMode mode = InstallMode::kSwap;
  // kCopy: the engine's live weights (required): a contiguous, scatter or
  // slices Destination, of `memory`'s kind. kSwap: must be unset.
  std::optional<Destination> live;
  // kSwap, partial: the byte ranges to stage (their `dest` and `dest_stride`
  // are ignored: the ranges are packed in order). Empty: every tensor.
  std::vector<TensorSlice> slices;
  // Where the library's buffers live: host memory (page-aligned, locked if
  // lock_host) or device memory of the current device.
  MemoryKind memory = MemoryKind::kHost;
  bool lock_host = false;
  // Ask for delta chains from the version the staging buffer holds.
  bool deltas = true;
  // Stage only versions whose bytes matched the publisher's checksum. With a
  // publisher that computes none, create() fails (kInvalidConfig) unless
  // this is false.
  bool require_checksum = true;
  // Stage each version in turn (newer_than = the staged one), not the newest.
  bool every_version = false;
  // Pull only the versions stage() names (engine ranks driven by a
  // coordinator: install_on_every_rank).
  bool pull_on_request = false;
  // A SubscriberGroup's members, in rank order (empty: every member stages
  // its whole layout, kSwap); `live` and `slices` above are then unused.
  std::vector<MemberStaging> members;
  // How long each background wait for a new version lasts before it looks
  // again whether it is being stopped (also bounds the destructor's wait).
  std::chrono::milliseconds poll{100};
  // After a failed pull that is not a connection error, wait this long
  // before the next.
  std::chrono::milliseconds retry_backoff{20};
  // Called on the background thread as bytes arrive, as PullOptions::on_progress.
  std::function<void(std::uint64_t, std::uint64_t)> on_progress;
};

// A version made live by install().
struct InstallResult {
  std::uint64_t version = 0;   // live now
  std::uint64_t previous = 0;  // live before (0: none)
  InstallMode mode = InstallMode::kSwap;
  // Time the caller was blocked in install(), the whole call: the lock, the
  // swap or the copy, waking the background pull. The engine's pause for
  // this update.
  double blocked_seconds = 0.0;
  // How long the version waited staged before this install.
  double staged_seconds = 0.0;
  // The background pull that staged it (its own time, retries, checksum,
  // signature, delta); never part of blocked_seconds.
  PullResult pull;
};

// Quantiles of the time install() blocked the caller, over the last 4096 installs.
struct PauseSummary {
  std::uint64_t count = 0;  // installs over the object's life
  double median_seconds = 0.0;
  double p99_seconds = 0.0;
  double max_seconds = 0.0;    // over the object's life
  double total_seconds = 0.0;  // over the object's life
};

struct StagedUpdatesStats {
  std::uint64_t staged = 0;        // versions staged (pulls that succeeded)
  std::uint64_t installs = 0;      // versions made live
  std::uint64_t failed_pulls = 0;  // background pulls that failed (the live weights untouched)
  std::uint64_t not_ready = 0;     // install() calls with nothing staged
  double pull_seconds = 0.0;       // background transfer time, summed
  PauseSummary blocked;            // the pauses install() caused
  SubscriberStats subscriber;      // the Subscriber's, as of its last pull
};

class StagedUpdates {
 public:
  static Result<std::unique_ptr<StagedUpdates>> create(std::unique_ptr<Subscriber> subscriber,
                                                       StagedUpdatesOptions options = {});
  // Every rank of a sharded trainer: one version complete on all of them.
  // Deltas and on_progress are not used.
  static Result<std::unique_ptr<StagedUpdates>> create(std::unique_ptr<SubscriberGroup> group,
                                                       StagedUpdatesOptions options = {});
  ~StagedUpdates();
  StagedUpdates(const StagedUpdates&) = delete;
  StagedUpdates& operator=(const StagedUpdates&) = delete;

  const WeightLayout& layout() const noexcept;
  InstallMode mode() const noexcept;
  // The transport the Subscriber negotiated.
  std::string transport() const;

  // Members: 1 for a Subscriber, the group's size for a SubscriberGroup.
  // The accessors below take the member (trainer rank); nullptr, 0 or
  // kInvalidArgument past the last.
  std::size_t members() const noexcept;
  const WeightLayout& layout(std::size_t member) const noexcept;
  // kSwap: the buffer the engine reads now (changes at each install) and its
  // size; kCopy: nullptr and 0 (the live weights are the engine's own).
  void* live_data(std::size_t member = 0) const noexcept;
  std::size_t live_bytes(std::size_t member = 0) const noexcept;
  // kSwap: buffer 0 or 1 (live_data() is one of them, the other is being
  // staged into), to wrap views over each once (a model over either buffer);
  // never read or write the one that is not live. nullptr otherwise.
  void* buffer_data(std::size_t index, std::size_t member = 0) const noexcept;
  // kSwap, whole layout: the address of `name` in the live buffer; nullptr
  // for an unknown name, a partial update or kCopy.
  void* tensor(const std::string& name, std::size_t member = 0) const noexcept;
  // kSwap, partial: the offset of slice `index`'s first range in the live
  // buffer (ranges packed in order, range by range); kInvalidArgument past
  // the end.
  Result<std::uint64_t> slice_offset(std::size_t index, std::size_t member = 0) const;

  // The version the live weights hold (0: none installed yet).
  std::uint64_t live_version() const noexcept;
  // The version staged and verified, waiting for install() (0: none).
  std::uint64_t staged_version() const noexcept;
  // Waits until a version is staged; returns it, kTimeout, or the
  // background thread's error once it has stopped.
  Result<std::uint64_t> wait_staged(std::chrono::milliseconds timeout) const;

  // Makes the staged version live (see the contract); kNotReady when nothing
  // is staged, the live weights untouched.
  Result<InstallResult> install();
  // Installs `version` only: kNotReady (nothing touched) when another
  // version, or none, is staged.
  Result<InstallResult> install(std::uint64_t version);
  // Asks the background thread for exactly `version` (pull_on_request), and
  // drops a staged version that is another one; wait_staged() then returns
  // it, or the reason it cannot be staged (kVersionRevoked: a trainer rank
  // no longer holds it). kInvalidArgument for version 0 or one not newer
  // than the live version.
  Status stage(std::uint64_t version);
  // Drops the staged version, if any; the live weights are untouched.
  void discard();

  // After a connection error (status() not OK), or to move to another
  // source (a relay, a restarted trainer): replaces the source with a new
  // connection serving the same layout(s), keeping the buffers and the live
  // version, so the engine serves on while it reconnects. Anything staged is
  // dropped; the next pull is a full one. accept_older: the next version
  // staged is the new source's newest even when it is older than the live
  // one (a trainer restarted from a checkpoint republishes from its
  // checkpoint's version); false: only a newer one is staged. kInvalidArgument
  // for another layout or another kind of source (a Subscriber for a
  // group's), and the errors of create(); the old source is kept then.
  Status reconnect(std::unique_ptr<Subscriber> subscriber, bool accept_older = false);
  Status reconnect(std::unique_ptr<SubscriberGroup> group, bool accept_older = false);

  // OK while the background thread runs; its error once it stopped.
  Status status() const;
  // The last failed background pull's error (OK if none failed).
  Status last_failure() const;
  StagedUpdatesStats stats() const;

  class Impl;

 private:
  explicit StagedUpdates(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The ranks of one engine in this process, updated all or nothing: each rank
// stages `version` (StagedUpdates::stage, concurrently), and only when every
// rank holds it verified does each install it; if any rank cannot stage it
// within `timeout`, every rank discards it and keeps serving its live version.
// The ranks must be made with pull_on_request. Errors: the first failing
// rank's error, its message naming the rank; kTimeout. Engine ranks in other
// processes run the same protocol over the engine's own RPC
// (docs/consistency.md, "All or nothing across engine ranks").
struct RanksInstallResult {
  std::uint64_t version = 0;
  double seconds = 0.0;              // staging on every rank, then installing
  double max_blocked_seconds = 0.0;  // the longest install() among the ranks
  std::vector<InstallResult> ranks;
};
Result<RanksInstallResult> install_on_every_rank(const std::vector<StagedUpdates*>& ranks,
                                                 std::uint64_t version, std::chrono::milliseconds timeout);

}  // namespace weightsync
