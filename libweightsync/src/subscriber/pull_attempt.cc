// One pull attempt: lease, read (whole, staged or streaming), release and
// verify (docs/consistency.md); and the cancellable wait for a newer version.
#include "subscriber/subscriber_impl.h"

#include <algorithm>
#include <optional>

#include "common/log.h"
#include "cuda/device_backend.h"

namespace weightsync {

Result<std::uint64_t> Subscriber::Impl::wait_newer(std::uint64_t newer_than,
                                                   std::chrono::milliseconds timeout,
                                                   const Cancellation& cancel) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  std::uint64_t latest = 0;
  for (bool first = true;; first = false) {
    if (cancel.active() && cancel.requested())
      return cancelled("waiting for a version newer than", newer_than);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !first) break;  // under a millisecond left: no query that cannot wait
    left = std::max(left, std::chrono::milliseconds(0));
    if (cancel.active()) left = std::min(left, kCancelPollInterval);
    const auto wait = static_cast<std::uint32_t>(std::clamp<long long>(left.count(), 0, 10 * 60 * 1000));
    auto reply = note(control.query_version(newer_than, wait, streaming()));
    if (!reply.ok()) return reply;
    latest = *reply;
    if (latest > newer_than) return latest;
    if (std::chrono::steady_clock::now() >= end) break;
  }
  return Status(ErrorCode::kTimeout, "no version newer than " + std::to_string(newer_than) + " within " +
                                         std::to_string(timeout.count()) +
                                         " ms (latest: " + std::to_string(latest) + ")");
}

Status Subscriber::Impl::ensure_staging() {
  if (staging) return Status();
  auto engine = detail::device_backend().make_staging(options.staging_chunks, options.staging_chunk_bytes);
  if (!engine.ok()) return engine.status();
  staging = std::make_unique<detail::StagingChannel>(*channel, std::move(*engine));
  WS_INFO("subscriber: staging pulls into CUDA memory through {} page-locked chunks of {} bytes ({})",
          options.staging_chunks, options.staging_chunk_bytes, channel->name());
  return Status();
}

Result<PullResult> Subscriber::Impl::attempt(const PullPlan::State& pulled, std::uint64_t newer_than,
                                             const PullOptions& pull_options, detail::StreamHasher& hasher,
                                             bool staged) {
  const std::vector<detail::ReadPiece>& plan = pulled.pieces;
  const bool exact = pull_options.version.has_value();
  // Nothing newer, seen locally (shm's stamp page) on a connection that
  // is idle and alive: no round trip. docs/perf/python.md has the cost.
  if (!exact && !streaming()) {
    const auto seen = channel->newest_committed();
    if (seen && *seen <= newer_than && control.quiet()) {
      return Status(ErrorCode::kNotReady, "no version newer than " + std::to_string(newer_than) +
                                              " (latest: " + std::to_string(*seen) + ")");
    }
  }
  // ACQUIRE_VIEW only where needed: ACQUIRE works with publishers before it.
  auto lease =
      exact || pulled.view_id != 0
          ? note(control.acquire_view(exact ? *pull_options.version : newer_than, exact, pulled.view_id))
          : note(control.acquire(newer_than, streaming() && !staged && !pulled.partial));
  if (!lease.ok()) return lease.status();
  if (lease->slot >= slot_count) {
    Status bad(ErrorCode::kProtocolError,
               "publisher leased slot " + std::to_string(lease->slot) + " of " + std::to_string(slot_count));
    note_status(bad);
    return bad;
  }
  hasher.reset();
  if (pull_options.on_start) pull_options.on_start(lease->version, lease->streaming());
  if (lease->streaming()) return attempt_streaming(*lease, plan, pull_options, hasher);
  std::uint64_t received = 0;
  const std::uint64_t total = pulled.bytes;
  // A partial pull checks its view's checksum; without a view there is none to check.
  if (version_key && !lease->has_checksum) {
    Status bad(ErrorCode::kProtocolError, "the publisher leased version " + std::to_string(lease->version) +
                                              " without its tag under integrity");
    note_status(bad);
    return bad;
  }
  const bool hashing =
      lease->has_checksum && options.verify_checksum && (!pulled.partial || pulled.view_id != 0);
  detail::ReadRequest request;
  request.lease_id = lease->lease_id;
  request.slot = lease->slot;
  request.stamp = lease->stamp;
  request.plan = &plan;
  request.stall_ms = io_timeout_ms;
  request.peer_alive = [this] { return control.peer_alive(); };
  request.hashing = hashing;
  request.on_bytes = [&](const void* p, std::size_t n) {
    if (hashing) hasher.update(p, n);
    received += n;
    if (pull_options.on_progress) pull_options.on_progress(received, total);
  };
  auto stamp_after = staged ? staging->read(request) : channel->read(request);
  // The publisher closes a data connection after any refusal but a revoked version.
  if (!stamp_after.ok())
    note_status(stamp_after.status(), stamp_after.status().code() != ErrorCode::kVersionRevoked);
  // Release before judging the read, so the slot is free again at once.
  if (sticky.ok()) note_status(control.release(lease->lease_id));
  if (!stamp_after.ok()) return stamp_after.status();
  if (*stamp_after != lease->stamp) {
    return Status(ErrorCode::kVersionRevoked,
                  "version " + std::to_string(lease->version) +
                      " was overwritten during the read (torn read detected and discarded)");
  }
  PullResult out;
  out.version = lease->version;
  out.bytes = received;
  out.staged = staged;
  out.partial = pulled.partial;
  if (hashing) {
    if (hasher.digest() != lease->checksum) {
      return Status(ErrorCode::kChecksumMismatch,
                    "checksum of version " + std::to_string(lease->version) +
                        " does not match the publisher's (corrupted in transit)");
    }
    out.checksum_verified = true;
    out.checksum = lease->checksum;
  }
  return out;
}

Result<PullResult> Subscriber::Impl::attempt_streaming(const detail::LeaseMsg& lease,
                                                       const std::vector<detail::ReadPiece>& plan,
                                                       const PullOptions& pull_options,
                                                       detail::StreamHasher& hasher) {
  std::uint64_t received = 0;
  const std::uint64_t total = layout.payload_bytes();
  const bool hashing = checksums && options.verify_checksum;
  std::uint64_t end = 0;
  for (const auto& p : plan) end = std::max(end, p.slot_offset + p.length);
  std::vector<detail::ReadPiece> step;
  detail::ReadRequest request;
  request.lease_id = lease.lease_id;
  request.slot = lease.slot;
  request.stamp = lease.stamp;
  request.plan = &step;
  request.stall_ms = io_timeout_ms;
  request.peer_alive = [this] { return control.peer_alive(); };
  request.hashing = hashing;
  request.on_bytes = [&](const void* p, std::size_t n) {
    if (hashing) hasher.update(p, n);
    received += n;
    if (pull_options.on_progress) pull_options.on_progress(received, total);
  };
  Status failure;
  std::size_t next = 0;          // the plan piece being read
  std::uint64_t piece_done = 0;  // of it, bytes already read
  std::uint64_t pos = 0;         // every plan byte below this slot offset was read
  while (pos < end && failure.ok()) {
    auto mark = control.wait_watermark(lease.lease_id, pos + 1);
    if (!mark.ok()) {
      // The publisher closes the control connection after any refusal but a revoked version.
      note_status(mark.status(), mark.status().code() != ErrorCode::kVersionRevoked);
      failure = mark.status();
      break;
    }
    const std::uint64_t limit = mark->committed ? end : std::min(mark->watermark, end);
    if (limit <= pos) {
      failure = Status(ErrorCode::kVersionRevoked, "in-progress version " + std::to_string(lease.version) +
                                                       " made no progress within the I/O timeout");
      break;
    }
    step.clear();
    while (next < plan.size() && plan[next].slot_offset + piece_done < limit) {
      const detail::ReadPiece& p = plan[next];
      const std::uint64_t to = std::min(p.slot_offset + p.length, limit);
      const std::uint64_t from = p.slot_offset + piece_done;
      step.push_back(detail::ReadPiece{from, to - from, static_cast<char*>(p.dest) + piece_done});
      piece_done += to - from;
      if (piece_done == p.length) {
        ++next;
        piece_done = 0;
      }
    }
    pos = limit;
    if (step.empty()) continue;
    auto stamp_after = channel->read(request);
    if (!stamp_after.ok()) {
      note_status(stamp_after.status(), stamp_after.status().code() != ErrorCode::kVersionRevoked);
      failure = stamp_after.status();
    } else if (*stamp_after != lease.stamp && *stamp_after != (lease.version << 1)) {
      failure =
          Status(ErrorCode::kVersionRevoked, "slot of in-progress version " + std::to_string(lease.version) +
                                                 " was rewritten during the read (discarded)");
    }
  }
  // The end: committed whole in the same slot, lease never revoked.
  std::optional<detail::WatermarkMsg> final_state;
  if (failure.ok()) {
    auto mark = control.wait_watermark(lease.lease_id, detail::WaitWatermarkMsg::kWaitForCommit);
    if (!mark.ok()) {
      note_status(mark.status(), mark.status().code() != ErrorCode::kVersionRevoked);
      failure = mark.status();
    } else if (!mark->committed) {
      failure = Status(ErrorCode::kVersionRevoked, "in-progress version " + std::to_string(lease.version) +
                                                       " was not committed within the I/O timeout");
    } else {
      final_state = *mark;
    }
  }
  if (sticky.ok()) note_status(control.release(lease.lease_id));
  if (!failure.ok()) return failure;
  PullResult out;
  out.version = lease.version;
  out.bytes = received;
  if (hashing && final_state->has_checksum) {
    if (hasher.digest() != final_state->checksum) {
      return Status(ErrorCode::kChecksumMismatch,
                    "checksum of version " + std::to_string(lease.version) +
                        " does not match the publisher's (corrupted in transit)");
    }
    out.checksum_verified = true;
    out.checksum = final_state->checksum;
  }
  ++stats.streamed_pulls;
  return out;
}

}  // namespace weightsync
