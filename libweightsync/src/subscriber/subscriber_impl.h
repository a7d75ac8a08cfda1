// Subscriber::Impl: the state of one subscriber session and the steps of a
// pull, defined by job in subscriber.cc (connect, the pull loop), pull_plans.cc,
// pull_signatures.cc, pull_attempt.cc and delta_pull.cc.
//
// Contract (weightsync/subscriber.h):
// - Threads: none of its own. One thread at a time per Subscriber; every step
//   runs on the caller's thread, each request bounded by the I/O timeout.
// - Ownership: owned by its Subscriber; owns the control connection, the data
//   channel (and the staging channel over it), the registered views and the
//   delta buffers. A PullPlan::State points back at its Impl (owner) and is
//   valid only with it.
// - Errors: the first connection-breaking error (breaks_connection(), or a
//   forced one) is kept in `sticky` and returned by every later call; kNotReady,
//   kVersionRevoked, kChecksumMismatch and argument errors are not sticky.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "auth/signing.h"
#include "common/checksum.h"
#include "delta/delta_apply.h"
#include "subscriber/control_client.h"
#include "transport/staging_channel.h"
#include "weightsync/subscriber.h"

namespace weightsync {

struct PullPlan::State {
  const Subscriber::Impl* owner = nullptr;
  std::vector<detail::ReadPiece> pieces;
  MemoryKind kind = MemoryKind::kHost;
  bool partial = false;
  std::uint64_t bytes = 0;
  std::vector<detail::ViewEntry> view;  // partial: the ranges in read order
  std::uint32_t view_id = 0;            // registered with the publisher (checksums on)
  // Destination spans to register as wholes (partial: one per run of slices),
  // and the channel's registration generation they were last ensured at.
  std::vector<std::pair<void*, std::size_t>> spans;
  std::optional<std::uint64_t> ensured_generation;
};

class Subscriber::Impl {
 public:
  Impl(detail::ControlClient c, WeightLayout l) : control(std::move(c)), layout(std::move(l)) {}

  detail::ControlClient control;
  WeightLayout layout;
  std::unique_ptr<detail::DataChannel> channel;
  std::size_t slot_count = 0;
  bool checksums = false;
  bool streaming_offered = false;   // the publisher's tcp offer has kTcpFeatureStreaming
  bool deltas_offered = false;      // SLOT_TABLE has kFeatureDeltas
  bool signatures_offered = false;  // SLOT_TABLE has kFeatureSignatures
  std::uint32_t delta_history = 0;  // the publisher's, from SLOT_TABLE (0: not advertised)
  // The integrity layer: the key of the version tags every pull verifies.
  std::shared_ptr<const detail::VersionKey> version_key;
  // The trainer's public key (SubscriberOptions::trusted_key): every whole
  // pull is checked against its signature; and this layout's SHA-256.
  std::optional<detail::VerifyKey> trusted_key;
  detail::Sha256Digest layout_sha{};
  std::uint64_t last_refused_version = 0;   // its refusal was logged
  detail::DeltaApplyBuffers delta_buffers;  // sized on the first delta pull
  std::vector<std::uint8_t> delta_bytes;
  SubscriberOptions options;
  std::vector<SettingReport> settings;  // what connect() resolved (settings())
  int io_timeout_ms = 10000;
  std::uint64_t held_version = 0;
  Status sticky;
  SubscriberStats stats;
  // stats() as of the last successful pull, for other threads
  // (stats_snapshot(): metrics scrapes); written by share_stats().
  mutable std::mutex shared_mu;
  SubscriberStats shared_stats;
  void share_stats();
  // Pulls into CUDA memory over a channel that cannot write it: `channel`
  // behind page-locked staging chunks, made on first use.
  std::unique_ptr<detail::StagingChannel> staging;
  // Views registered with the publisher, by a hash of their entries.
  std::unordered_map<std::uint64_t, std::vector<std::pair<std::vector<detail::ViewEntry>, std::uint32_t>>>
      views;

  // ---- errors (subscriber.cc) ----

  // Errors after which the connection's byte stream can no longer be trusted.
  static bool breaks_connection(const Status& s);
  // Records the first connection-breaking error (it stays sticky).
  void note_status(const Status& s, bool force = false);
  template <typename T>
  Result<T> note(Result<T> r) {
    if (!r.ok()) note_status(r.status());
    return r;
  }
  static Status cancelled(const char* what, std::uint64_t version) {
    return Status(ErrorCode::kCancelled, std::string("cancelled while ") + what + " " +
                                             std::to_string(version) + " (the subscriber is still usable)");
  }

  // ---- plans of destinations (pull_plans.cc) ----

  // The plan of any destination; partial ones get their view registered
  // (once per distinct view for the session's life: view_ids).
  Result<std::shared_ptr<PullPlan::State>> plan_for(const Destination& dst);
  // The publisher's id of a view, registering it on first sight.
  Result<std::uint32_t> view_id_for(const std::vector<detail::ViewEntry>& view);
  // Registers a prepared plan's spans again after release_memory().
  Status ensure_registered(PullPlan::State& state);

  // ---- the trainer's signatures (pull_signatures.cc) ----

  // FETCH_SIGNATURE, asked again (after 1 ms, doubling to 20 ms) while the
  // publisher says the version is not signed yet, up to the I/O timeout.
  Result<std::vector<std::uint8_t>> fetch_signature(std::uint64_t version);
  // Checks the version just delivered through `plan` against the trainer's
  // signature (auth/signing.h): its block, then the bytes, chunk by chunk.
  Status check_signature(const PullPlan::State& plan, std::uint64_t version);
  // check_signature(), timed and counted in stats; a refusal is logged once per version.
  Status verify_signature(const PullPlan::State& plan, std::uint64_t version);

  // ---- the pull loop (subscriber.cc) ----

  // One pull's progress, shared by the steps of pull().
  struct PullRun {
    PullRun(PullPlan::State& p, const PullOptions& o) : plan(p), pull_options(o) {}
    PullPlan::State& plan;
    const PullOptions& pull_options;
    std::chrono::steady_clock::time_point start;
    bool staged = false;  // into CUDA memory through `staging`
    bool exact = false;   // pull_options.version names the version
    // What "newer" means: newer than held_version(), or (exact) reaching the version.
    std::uint64_t newer_than = 0;
    std::chrono::steady_clock::time_point wait_until;
    std::uint32_t retries = 0;
    std::chrono::steady_clock::duration waited{0};
    bool delta_fell_back = false;
  };
  // The retry and wait loop of every pull.
  Result<PullResult> pull(PullPlan::State& plan, const PullOptions& pull_options);
  // The checks of a pull's options against its plan and this session.
  Status check_pull(const PullRun& run) const;
  // A pull by deltas once a newer version exists; nullopt: pull in full instead.
  std::optional<Result<PullResult>> pull_by_delta(PullRun& run);
  // Whole attempts until one succeeds or fails for good, retrying revoked
  // versions and checksum mismatches, waiting while nothing is newer.
  Result<PullResult> pull_in_full(PullRun& run, detail::StreamHasher& hasher);
  // After kNotReady: waits (until run.wait_until) for a newer version. OK:
  // attempt again; otherwise the pull's error.
  Status wait_after_not_ready(PullRun& run, const Status& not_ready);
  // The bookkeeping of a delivered pull: its timings, held_version, stats.
  void record_delta_pull(const PullRun& run, PullResult& result);
  void record_full_pull(const PullRun& run, PullResult& result);

  // ---- attempts (pull_attempt.cc; deltas: delta_pull.cc) ----

  // QUERY_VERSION waiting up to `timeout` for a version newer than `newer_than`.
  // Cancellable: then in queries of kCancelPollInterval each (the publisher
  // parks a waiting query without a thread, so slicing costs one small round
  // trip per interval), looking at `cancel` between them.
  Result<std::uint64_t> wait_newer(std::uint64_t newer_than, std::chrono::milliseconds timeout,
                                   const Cancellation& cancel = {});
  // Whether this subscriber pulls in-progress versions (accept_streaming,
  // offered, tcp). Other transports read one-sidedly: whole versions only.
  bool streaming() const {
    return options.accept_streaming && streaming_offered && std::string(channel->name()) == "tcp";
  }
  // The staging channel for device destinations, made once.
  Status ensure_staging();
  // One attempt: lease, read, release, verify.
  Result<PullResult> attempt(const PullPlan::State& pulled, std::uint64_t newer_than,
                             const PullOptions& pull_options, detail::StreamHasher& hasher, bool staged);
  // A streaming lease (docs/relays.md, "The pipelined chain"): read the plan
  // in pieces, each only below the watermark the publisher reported, then
  // require that the same slot holds the leased version committed and the
  // lease was never revoked, then verify the committed checksum.
  Result<PullResult> attempt_streaming(const detail::LeaseMsg& lease,
                                       const std::vector<detail::ReadPiece>& plan,
                                       const PullOptions& pull_options, detail::StreamHasher& hasher);
  // One pull by deltas from pull_options.delta_base to a version >= latest.
  // Any failure (the publisher's refusal, a link that does not decode, a
  // result that fails its checksum) is answered by pull() with a full pull,
  // unless it broke the connection.
  Result<PullResult> delta_attempt(const PullPlan::State& plan, std::uint64_t newer_than,
                                   const PullOptions& pull_options, std::uint64_t latest);
};

}  // namespace weightsync
