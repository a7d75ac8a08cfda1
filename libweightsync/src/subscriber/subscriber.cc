// Subscriber: connect + negotiate, and pull with lease, seqlock re-check,
// checksum verification and automatic retry (docs/consistency.md).
#include "weightsync/subscriber.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <unordered_map>

#include "auth/signing.h"
#include "common/checksum.h"
#include "common/deadline.h"
#include "common/log.h"
#include "cuda/device_backend.h"
#include "delta/delta_apply.h"
#include "subscriber/control_client.h"
#include "subscriber/negotiation.h"
#include "subscriber/subscriber_settings.h"
#include "transport/staging_channel.h"

namespace weightsync {

// ---- Destination ----

Destination Destination::contiguous(void* data, std::size_t bytes, MemoryKind kind) {
  Destination d;
  d.shape_ = Shape::kContiguous;
  d.kind_ = kind;
  d.data_ = data;
  d.bytes_ = bytes;
  return d;
}

Destination Destination::scatter(std::vector<ScatterEntry> entries, MemoryKind kind) {
  Destination d;
  d.shape_ = Shape::kScatter;
  d.kind_ = kind;
  d.entries_ = std::move(entries);
  return d;
}

Destination Destination::slices(std::vector<TensorSlice> slices, MemoryKind kind) {
  Destination d;
  d.shape_ = Shape::kSlices;
  d.kind_ = kind;
  d.slices_ = std::move(slices);
  return d;
}

// ---- PullPlan ----

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

std::uint64_t PullPlan::bytes() const noexcept {
  return state_ ? state_->bytes : 0;
}
std::size_t PullPlan::pieces() const noexcept {
  return state_ ? state_->pieces.size() : 0;
}
bool PullPlan::partial() const noexcept {
  return state_ && state_->partial;
}

// ---- Subscriber::Impl ----

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
  // Pulls into CUDA memory over a channel that cannot write it: `channel`
  // behind page-locked staging chunks, made on first use.
  std::unique_ptr<detail::StagingChannel> staging;
  // Views registered with the publisher, by a hash of their entries.
  std::unordered_map<std::uint64_t, std::vector<std::pair<std::vector<detail::ViewEntry>, std::uint32_t>>>
      views;

  // Errors after which the connection's byte stream can no longer be trusted.
  static bool breaks_connection(const Status& s) {
    switch (s.code()) {
      case ErrorCode::kConnectionLost:
      case ErrorCode::kProtocolError:
      case ErrorCode::kTimeout:
      case ErrorCode::kAuthFailed:
      case ErrorCode::kInternal: return true;
      default: return false;
    }
  }

  // Records the first connection-breaking error (it stays sticky).
  void note_status(const Status& s, bool force = false) {
    if (!s.ok() && (force || breaks_connection(s)) && sticky.ok()) {
      sticky = s;
      WS_WARN("subscriber: connection to the publisher is unusable: {}", sticky.to_string());
    }
  }

  template <typename T>
  Result<T> note(Result<T> r) {
    if (!r.ok()) note_status(r.status());
    return r;
  }

  // Device destinations: each region must be device memory of the current device.
  Status check_device_destination(const Destination& dst) const {
    const detail::DeviceBackend backend = detail::device_backend();
    if (dst.is_contiguous()) {
      return backend.check_device_memory(dst.data(), std::min<std::size_t>(dst.bytes(), layout.total_bytes()),
                                         "the contiguous destination");
    }
    for (const auto& e : dst.entries()) {
      Status s = backend.check_device_memory(e.data, e.bytes, "a scatter destination entry");
      if (!s.ok()) return Status(s.code(), "tensor '" + e.name + "': " + s.message());
    }
    return Status();
  }

  Result<std::vector<detail::ReadPiece>> whole_plan_for(const Destination& dst) const {
    if (dst.memory_kind() != MemoryKind::kHost && dst.memory_kind() != MemoryKind::kCuda) {
      return Status(ErrorCode::kInvalidArgument,
                    "unknown destination memory kind " + std::to_string(static_cast<int>(dst.memory_kind())));
    }
    std::vector<detail::ReadPiece> plan;
    const auto& tensors = layout.tensors();
    if (dst.is_contiguous()) {
      if (dst.data() == nullptr || dst.bytes() < layout.total_bytes()) {
        return Status(ErrorCode::kInvalidArgument,
                      "contiguous destination has " + std::to_string(dst.bytes()) +
                          " bytes; the layout needs " + std::to_string(layout.total_bytes()));
      }
      if (dst.memory_kind() == MemoryKind::kCuda) {
        if (Status s = check_device_destination(dst); !s.ok()) return s;
      }
      auto* base = static_cast<char*>(dst.data());
      for (const auto& t : tensors) {
        // Coalesce tensors with no padding between them into one piece.
        if (!plan.empty() && plan.back().slot_offset + plan.back().length == t.offset) {
          plan.back().length += t.bytes;
        } else {
          plan.push_back(detail::ReadPiece{t.offset, t.bytes, base + t.offset});
        }
      }
      return plan;
    }
    std::vector<void*> by_index(tensors.size(), nullptr);
    for (const auto& e : dst.entries()) {
      const TensorEntry* t = layout.find(e.name);
      if (t == nullptr)
        return Status(ErrorCode::kInvalidArgument,
                      "scatter destination names unknown tensor '" + e.name + "'");
      const std::size_t i = static_cast<std::size_t>(t - tensors.data());
      if (by_index[i] != nullptr)
        return Status(ErrorCode::kInvalidArgument, "scatter destination names '" + e.name + "' twice");
      if (e.data == nullptr || e.bytes != t->bytes) {
        return Status(ErrorCode::kInvalidArgument, "scatter entry '" + e.name + "' has " +
                                                       std::to_string(e.bytes) + " bytes; the tensor has " +
                                                       std::to_string(t->bytes));
      }
      by_index[i] = e.data;
    }
    if (dst.memory_kind() == MemoryKind::kCuda) {
      if (Status s = check_device_destination(dst); !s.ok()) return s;
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (by_index[i] == nullptr) {
        return Status(ErrorCode::kInvalidArgument, "scatter destination is missing tensor '" +
                                                       tensors[i].spec.name +
                                                       "' (every tensor must be given once)");
      }
      plan.push_back(detail::ReadPiece{tensors[i].offset, tensors[i].bytes, by_index[i]});
    }
    return plan;
  }

  // A partial destination's reads, in slice order then range order, each
  // checked to lie inside its tensor; and its view (the same ranges, strided).
  Status slices_plan(const Destination& dst, PullPlan::State& out) const {
    const auto& slices = dst.tensor_slices();
    if (slices.empty()) return Status(ErrorCode::kInvalidArgument, "a partial destination names no slice");
    std::uint64_t total = 0;
    for (const auto& slice : slices) {
      const TensorEntry* t = layout.find(slice.tensor);
      if (t == nullptr) {
        return Status(ErrorCode::kInvalidArgument, "a slice names unknown tensor '" + slice.tensor + "'");
      }
      const std::string where = "slice of '" + slice.tensor + "'";
      if (slice.dest == nullptr || slice.length == 0 || slice.count == 0) {
        return Status(ErrorCode::kInvalidArgument, where + " has no destination, no length or no ranges");
      }
      if (slice.count > 1 && slice.stride < slice.length) {
        return Status(ErrorCode::kInvalidArgument,
                      where + ": stride " + std::to_string(slice.stride) + " is shorter than the range (" +
                          std::to_string(slice.length) + " bytes): ranges overlap");
      }
      const std::uint64_t dest_stride = slice.dest_stride == 0 ? slice.length : slice.dest_stride;
      std::uint64_t last = 0, end = 0, bytes = 0, dest_last = 0;
      if (__builtin_mul_overflow(slice.count - 1, slice.stride, &last) ||
          __builtin_add_overflow(last, slice.offset, &last) ||
          __builtin_add_overflow(last, slice.length, &end) || end > t->bytes ||
          __builtin_mul_overflow(slice.count, slice.length, &bytes) ||
          __builtin_mul_overflow(slice.count - 1, dest_stride, &dest_last) ||
          __builtin_add_overflow(total, bytes, &total)) {
        return Status(ErrorCode::kInvalidArgument,
                      where + " reaches past the tensor's " + std::to_string(t->bytes) + " bytes");
      }
      if (slice.count > 1 && dest_stride < slice.length) {
        return Status(ErrorCode::kInvalidArgument, where + ": dest_stride is shorter than the range");
      }
      auto* dest = static_cast<char*>(slice.dest);
      const std::uint64_t offset = t->offset + slice.offset;
      if (slice.count == 1 || (slice.stride == slice.length && dest_stride == slice.length)) {
        // One contiguous run on both sides.
        out.pieces.push_back(detail::ReadPiece{offset, bytes, dest});
        out.view.push_back(detail::ViewEntry{offset, bytes, 1, 0});
      } else {
        for (std::uint64_t i = 0; i < slice.count; ++i) {
          out.pieces.push_back(
              detail::ReadPiece{offset + i * slice.stride, slice.length, dest + i * dest_stride});
        }
        out.view.push_back(detail::ViewEntry{offset, slice.length, slice.count, slice.stride});
      }
      out.spans.emplace_back(dest, static_cast<std::size_t>(dest_last + slice.length));
    }
    if (total > layout.payload_bytes()) {
      return Status(ErrorCode::kInvalidArgument,
                    "the slices name " + std::to_string(total) + " bytes, more than the layout's " +
                        std::to_string(layout.payload_bytes()) + ": name each byte once");
    }
    out.bytes = total;
    merge_spans(out.spans);
    return Status();
  }

  // Overlapping or touching spans become one (one registration per run).
  static void merge_spans(std::vector<std::pair<void*, std::size_t>>& spans) {
    std::sort(spans.begin(), spans.end());
    std::vector<std::pair<void*, std::size_t>> merged;
    for (const auto& [p, n] : spans) {
      auto* begin = static_cast<char*>(p);
      if (!merged.empty()) {
        auto* last_begin = static_cast<char*>(merged.back().first);
        if (begin <= last_begin + merged.back().second) {
          const std::size_t end = std::max<std::size_t>(merged.back().second, (begin - last_begin) + n);
          merged.back().second = end;
          continue;
        }
      }
      merged.emplace_back(p, n);
    }
    spans = std::move(merged);
  }

  // The plan of any destination; partial ones get their view registered
  // (once per distinct view for the session's life: view_ids).
  Result<std::shared_ptr<PullPlan::State>> plan_for(const Destination& dst) {
    auto state = std::make_shared<PullPlan::State>();
    state->owner = this;
    state->kind = dst.memory_kind();
    if (!dst.is_partial()) {
      auto whole = whole_plan_for(dst);
      if (!whole.ok()) return whole.status();
      state->pieces = std::move(*whole);
      state->bytes = layout.payload_bytes();
      return state;
    }
    if (dst.memory_kind() != MemoryKind::kHost && dst.memory_kind() != MemoryKind::kCuda) {
      return Status(ErrorCode::kInvalidArgument,
                    "unknown destination memory kind " + std::to_string(static_cast<int>(dst.memory_kind())));
    }
    state->partial = true;
    if (Status s = slices_plan(dst, *state); !s.ok()) return s;
    if (dst.memory_kind() == MemoryKind::kCuda) {
      const detail::DeviceBackend backend = detail::device_backend();
      for (const auto& [p, n] : state->spans) {
        if (Status s = backend.check_device_memory(p, n, "a slice destination"); !s.ok()) return s;
      }
    }
    if (checksums && options.verify_checksum) {
      auto id = view_id_for(state->view);
      if (!id.ok()) return id.status();
      state->view_id = *id;
    }
    return state;
  }

  // The publisher's id of a view, registering it on first sight.
  Result<std::uint32_t> view_id_for(const std::vector<detail::ViewEntry>& view) {
    detail::StreamHasher h;
    h.update(view.data(), view.size() * sizeof(detail::ViewEntry));
    const std::uint64_t key = h.digest();
    for (const auto& known : views[key]) {
      if (known.first.size() == view.size() &&
          std::equal(view.begin(), view.end(), known.first.begin(), [](const auto& a, const auto& b) {
            return a.offset == b.offset && a.length == b.length && a.count == b.count && a.stride == b.stride;
          })) {
        return known.second;
      }
    }
    auto id = note(control.register_view(view));
    if (!id.ok()) {
      if (id.status().code() == ErrorCode::kProtocolError && sticky.code() == ErrorCode::kProtocolError) {
        return Status(ErrorCode::kProtocolError,
                      id.status().message() + " (a publisher older than partial pulls? upgrade it)");
      }
      return id.status();
    }
    views[key].emplace_back(view, *id);
    ++stats.views;
    return *id;
  }

  // FETCH_SIGNATURE, asked again (after 1 ms, doubling to 20 ms) while the
  // publisher says the version is not signed yet, up to the I/O timeout.
  Result<std::vector<std::uint8_t>> fetch_signature(std::uint64_t version) {
    if (!signatures_offered) {  // never sent: a publisher before signatures would close the connection
      return Status(
          ErrorCode::kInvalidConfig,
          "this publisher serves no signatures (its trainer runs without WEIGHTSYNC_SIGNING_KEY, or it "
          "predates signatures)");
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(io_timeout_ms);
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      auto block = note(control.fetch_signature(version));
      if (block.ok() || block.status().code() != ErrorCode::kNotReady) return block;
      if (std::chrono::steady_clock::now() + pause >= end) {
        return Status(ErrorCode::kTimeout, "the publisher had no signature for version " +
                                               std::to_string(version) + " within " +
                                               std::to_string(io_timeout_ms) +
                                               " ms (is the trainer's signer keeping up? see its "
                                               "PublisherStats::versions_unsigned)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
  }

  // Checks the version just delivered through `plan` against the trainer's
  // signature (auth/signing.h): its block, then the bytes, chunk by chunk.
  Status check_signature(const PullPlan::State& plan, std::uint64_t version) {
    auto bytes = fetch_signature(version);
    if (!bytes.ok()) {
      if (bytes.status().code() != ErrorCode::kInvalidConfig) return bytes.status();
      return Status(ErrorCode::kAuthFailed,
                    "version " + std::to_string(version) + " came without the trainer's signature (" +
                        bytes.status().message() +
                        "); this subscriber accepts only signed versions (WEIGHTSYNC_TRUSTED_KEY): start the "
                        "trainer with WEIGHTSYNC_SIGNING_KEY, through relays of this release or later");
    }
    auto block =
        detail::SignatureBlock::decode(*bytes, layout.payload_bytes() / detail::kMinSignatureChunkBytes + 1);
    if (!block.ok()) {
      return Status(ErrorCode::kAuthFailed, "version " + std::to_string(version) + " came with " +
                                                block.status().message() + ": refused");
    }
    if (Status s =
            detail::verify_statement(*trusted_key, *block, version, layout_sha, layout.payload_bytes());
        !s.ok()) {
      return s;
    }
    std::vector<detail::PayloadPiece> payload;  // the plan is in layout order
    payload.reserve(plan.pieces.size());
    for (const auto& piece : plan.pieces) payload.push_back({piece.dest, piece.length});
    return detail::check_chunks(*block, detail::digest_pieces(payload, block->chunk_bytes));
  }

  Status verify_signature(const PullPlan::State& plan, std::uint64_t version) {
    const auto start = std::chrono::steady_clock::now();
    Status s = check_signature(plan, version);
    stats.verify_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s.ok()) {
      ++stats.signatures_verified;
    } else if (s.code() == ErrorCode::kAuthFailed || s.code() == ErrorCode::kChecksumMismatch) {
      ++stats.signatures_refused;
      if (version != last_refused_version) WS_WARN("subscriber: {}", s.message());  // once per version
      last_refused_version = version;
    }
    return s;
  }

  // One pull by deltas from pull_options.delta_base to a version >= latest
  // (defined below). Any failure (the publisher's refusal, a link that does
  // not decode, a result that fails its checksum) is answered by pull() with
  // a full pull, unless it broke the connection.
  Result<PullResult> delta_attempt(const PullPlan::State& plan, std::uint64_t newer_than,
                                   const PullOptions& pull_options, std::uint64_t latest);

  // The retry and wait loop of every pull (defined below).
  Result<PullResult> pull(PullPlan::State& plan, const PullOptions& pull_options);
  // QUERY_VERSION waiting up to `timeout` for a version newer than `newer_than`.
  // Cancellable: then in queries of kCancelPollInterval each (the publisher
  // parks a waiting query without a thread, so slicing costs one small round
  // trip per interval), looking at `cancel` between them.
  Result<std::uint64_t> wait_newer(std::uint64_t newer_than, std::chrono::milliseconds timeout,
                                   const Cancellation& cancel = {}) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    std::uint64_t latest = 0;
    for (bool first = true;; first = false) {
      if (cancel.active() && cancel.requested())
        return cancelled("waiting for a version newer than", newer_than);
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
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

  static Status cancelled(const char* what, std::uint64_t version) {
    return Status(ErrorCode::kCancelled, std::string("cancelled while ") + what + " " +
                                             std::to_string(version) + " (the subscriber is still usable)");
  }

  // Registers a prepared plan's spans again after release_memory().
  Status ensure_registered(PullPlan::State& state) {
    const std::uint64_t generation = channel->registration_generation();
    if (state.ensured_generation == generation) return Status();
    for (const auto& [p, n] : state.spans) {
      if (Status s = channel->register_region(p, n); !s.ok()) return s;
    }
    state.ensured_generation = channel->registration_generation();
    return Status();
  }

  // Whether this subscriber pulls in-progress versions (accept_streaming,
  // offered, tcp). Other transports read one-sidedly: whole versions only.
  bool streaming() const {
    return options.accept_streaming && streaming_offered && std::string(channel->name()) == "tcp";
  }

  // The staging channel for device destinations, made once.
  Status ensure_staging() {
    if (staging) return Status();
    auto engine = detail::device_backend().make_staging(options.staging_chunks, options.staging_chunk_bytes);
    if (!engine.ok()) return engine.status();
    staging = std::make_unique<detail::StagingChannel>(*channel, std::move(*engine));
    WS_INFO("subscriber: staging pulls into CUDA memory through {} page-locked chunks of {} bytes ({})",
            options.staging_chunks, options.staging_chunk_bytes, channel->name());
    return Status();
  }

  // One attempt: lease, read, release, verify.
  Result<PullResult> attempt(const PullPlan::State& pulled, std::uint64_t newer_than,
                             const PullOptions& pull_options, detail::StreamHasher& hasher, bool staged) {
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
      Status bad(ErrorCode::kProtocolError, "publisher leased slot " + std::to_string(lease->slot) + " of " +
                                                std::to_string(slot_count));
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

  // A streaming lease (docs/relays.md, "The pipelined chain"): read the plan
  // in pieces, each only below the watermark the publisher reported, then
  // require that the same slot holds the leased version committed and the
  // lease was never revoked, then verify the committed checksum.
  Result<PullResult> attempt_streaming(const detail::LeaseMsg& lease,
                                       const std::vector<detail::ReadPiece>& plan,
                                       const PullOptions& pull_options, detail::StreamHasher& hasher) {
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
        failure = Status(ErrorCode::kVersionRevoked, "slot of in-progress version " +
                                                         std::to_string(lease.version) +
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
};

Subscriber::Subscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Subscriber::~Subscriber() {
  if (!impl_) return;
  if (impl_->channel) impl_->channel->close();
  impl_->control.bye();
}

Result<std::unique_ptr<Subscriber>> Subscriber::connect(const std::string& address,
                                                        SubscriberOptions options) try {
  auto target = detail::parse_host_port(address);
  if (!target.ok()) return target.status();
  auto resolved = detail::resolve_subscriber_settings(options);
  if (!resolved.ok()) return resolved.status();
  detail::SubscriberSettings& settings = *resolved;
  std::shared_ptr<const detail::VersionKey> version_key;
  if (settings.integrity.value) {
    auto key = detail::derive_version_key(settings.secret.value);
    if (!key.ok()) return key.status();
    version_key = std::move(*key);
    options.verify_checksum = true;
  }
  auto control = detail::ControlClient::connect(
      *target, settings.secret.value, options.client_name, settings.connect_timeout_ms.value,
      settings.io_timeout_ms.value, settings.integrity.value, settings.encryption.value);
  if (!control.ok()) return control.status();
  auto layout = control->get_layout();
  if (!layout.ok()) return layout.status();
  auto table = control->get_slot_table();
  if (!table.ok()) return table.status();
  if (table->slot_bytes != layout->total_bytes()) {
    return Status(ErrorCode::kProtocolError, "publisher's slots (" + std::to_string(table->slot_bytes) +
                                                 " bytes) do not match its layout (" +
                                                 std::to_string(layout->total_bytes()) + " bytes)");
  }
  const std::uint64_t session = control->session_id();
  auto impl = std::make_unique<Impl>(std::move(*control), std::move(*layout));
  detail::NegotiationInput negotiation;
  negotiation.requested = settings.transport.value;
  negotiation.offers = table->transports;
  negotiation.publisher = *target;
  negotiation.secret = settings.secret.value;
  negotiation.session_id = session;
  negotiation.client_name = options.client_name;
  negotiation.connect_timeout_ms = settings.connect_timeout_ms.value;
  negotiation.slot_count = table->slot_count;
  negotiation.slot_bytes = table->slot_bytes;
  negotiation.exchange = [control = &impl->control](const std::string& name,
                                                    const std::vector<std::uint8_t>& blob) {
    return control->transport_connect(name, blob);
  };
  negotiation.encryption = settings.encryption.value;
  auto channel = detail::negotiate_transport(negotiation);
  if (!channel.ok()) return channel.status();
  impl->channel = std::move(*channel);
  impl->slot_count = table->slot_count;
  impl->checksums = table->checksums;
  if (version_key && !impl->checksums) {
    return Status(ErrorCode::kProtocolError, "the publisher agreed to integrity but serves no version tags");
  }
  impl->version_key = std::move(version_key);
  if (settings.verify_key) {
    impl->trusted_key = std::move(settings.verify_key);
    impl->layout_sha = detail::layout_digest(impl->layout);
  }
  impl->deltas_offered = (table->features & detail::kFeatureDeltas) != 0;
  impl->signatures_offered = (table->features & detail::kFeatureSignatures) != 0;
  impl->delta_history =
      (table->features >> detail::kFeatureDeltaHistoryShift) & detail::kFeatureDeltaHistoryMask;
  for (const auto& offer : table->transports) {
    if (offer.name != "tcp") continue;
    auto tcp = detail::TcpOffer::decode(offer.blob);  // a malformed one: no features
    impl->streaming_offered = tcp.ok() && (tcp->features & detail::kTcpFeatureStreaming) != 0;
  }
  impl->io_timeout_ms = settings.io_timeout_ms.value;
  impl->options = std::move(options);
  impl->settings = settings.reports();
  WS_INFO(
      "subscriber: connected to {} (transport {}; {} slots x {} bytes; checksums {}; signatures {}); "
      "settings: {}",
      address, impl->channel->name(), impl->slot_count, impl->layout.total_bytes(),
      impl->checksums ? "on" : "off",
      impl->trusted_key ? "checked against key " + detail::short_hex(impl->trusted_key->key_id())
                        : std::string("not checked"),
      detail::settings_log_text(impl->settings));
  return std::unique_ptr<Subscriber>(new Subscriber(std::move(impl)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::connect: ") + e.what());
}

Result<std::unique_ptr<Subscriber>> Subscriber::connect_any(const std::vector<std::string>& addresses,
                                                            SubscriberOptions options) try {
  if (addresses.empty()) {
    return Status(ErrorCode::kInvalidArgument, "connect_any() needs at least one address");
  }
  std::string reasons;
  Status last;
  for (const auto& address : addresses) {
    auto connected = connect(address, options);
    if (connected.ok()) return connected;
    last = connected.status();
    WS_INFO("subscriber: {} not usable ({}); trying the next source", address, last.to_string());
    if (!reasons.empty()) reasons += "; ";
    reasons += address + ": " + last.message();
  }
  return Status(last.code(), "no source could be connected (" + reasons + ")");
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::connect_any: ") + e.what());
}

const WeightLayout& Subscriber::layout() const noexcept {
  return impl_->layout;
}
std::size_t Subscriber::slot_count() const noexcept {
  return impl_->slot_count;
}
std::string Subscriber::transport() const {
  return impl_->channel->name();
}
bool Subscriber::publisher_checksums() const noexcept {
  return impl_->checksums;
}
bool Subscriber::publisher_deltas() const noexcept {
  return impl_->deltas_offered;
}
std::vector<SettingReport> Subscriber::settings() const {
  return impl_->settings;
}
bool Subscriber::encrypted() const noexcept {
  return impl_->control.encrypted();
}
std::uint64_t Subscriber::held_version() const noexcept {
  return impl_->held_version;
}
SubscriberStats Subscriber::stats() const {
  SubscriberStats s = impl_->stats;
  s.registrations = impl_->staging ? impl_->staging->registrations() : impl_->channel->registrations();
  s.registrations_released = impl_->channel->released_registrations();
  return s;
}

Status Subscriber::status() const {
  return impl_->sticky;
}

Result<std::uint64_t> Subscriber::latest_version() try {
  if (!impl_->sticky.ok()) return impl_->sticky;
  return impl_->note(impl_->control.query_version(0, 0, impl_->streaming()));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::latest_version: ") + e.what());
}

Result<std::vector<std::uint8_t>> Subscriber::signature_block(std::uint64_t version) try {
  if (!impl_->sticky.ok()) return impl_->sticky;
  if (version == 0) return Status(ErrorCode::kInvalidArgument, "version 0 is never published");
  return impl_->fetch_signature(version);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::signature_block: ") + e.what());
}

Result<std::uint64_t> Subscriber::wait_for_version(std::uint64_t newer_than,
                                                   std::chrono::milliseconds timeout,
                                                   const Cancellation& cancel) try {
  if (!impl_->sticky.ok()) return impl_->sticky;
  return impl_->wait_newer(newer_than, timeout, cancel);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::wait_for_version: ") + e.what());
}

Result<PullResult> Subscriber::Impl::pull(PullPlan::State& plan, const PullOptions& pull_options) {
  const auto start = std::chrono::steady_clock::now();
  const bool staged = plan.kind == MemoryKind::kCuda && !channel->writes_device_memory();
  if (staged) {
    if (Status s = ensure_staging(); !s.ok()) return s;
  }
  const bool exact = pull_options.version.has_value();
  if (exact && *pull_options.version == 0)
    return Status(ErrorCode::kInvalidArgument, "version 0 is never published");
  if (trusted_key && (plan.partial || plan.kind != MemoryKind::kHost)) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string("a ") + (plan.partial ? "partial pull" : "pull into CUDA memory") +
                      " cannot be checked against the trainer's signature (it digests whole versions in host "
                      "memory): pull whole versions into host memory, or unset WEIGHTSYNC_TRUSTED_KEY");
  }
  // What "newer" means: newer than held_version(), or (exact) reaching the version.
  const std::uint64_t newer_than =
      exact ? *pull_options.version - 1 : pull_options.newer_than.value_or(held_version);
  // A wait too long for the clock never ends: the pull waits as long as the
  // connection lives, one bounded query at a time.
  const auto wait_until = detail::wait_end(start, pull_options.wait);
  detail::StreamHasher hasher(version_key);
  std::uint32_t retries = 0;
  std::chrono::steady_clock::duration waited{0};
  const Cancellation& cancel = pull_options.cancel;
  bool delta_fell_back = false;
  if (pull_options.delta_base && deltas_offered && !exact && !plan.partial &&
      plan.kind == MemoryKind::kHost && *pull_options.delta_base > 0) {
    // Only once a newer version exists: the wait is the pull's.
    auto latest = pull_options.wait.count() > 0 ? wait_newer(newer_than, pull_options.wait, cancel)
                                                : note(control.query_version(newer_than, 0, false));
    if (!latest.ok()) {
      if (latest.status().code() == ErrorCode::kTimeout) {
        return Status(ErrorCode::kNotReady, latest.status().message());
      }
      return latest.status();
    }
    waited += std::chrono::steady_clock::now() - start;
    if (*latest <= newer_than) {
      return Status(ErrorCode::kNotReady, "no version newer than " + std::to_string(newer_than) +
                                              " (latest: " + std::to_string(*latest) + ")");
    }
    auto result = delta_attempt(plan, newer_than, pull_options, *latest);
    if (result.ok() && trusted_key) {
      Status verified = verify_signature(plan, result->version);
      if (verified.ok()) {
        result->signature_verified = true;
      } else if (verified.code() == ErrorCode::kAuthFailed || !sticky.ok()) {
        return verified;  // the full pull would meet the same signature, or no connection
      } else {
        result = verified;  // bytes that differ: pull in full instead
      }
    }
    if (result.ok()) {
      result->wait_seconds = std::chrono::duration<double>(waited).count();
      result->seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start - waited).count();
      held_version = result->version;
      ++stats.pulls;
      ++stats.delta_pulls;
      stats.bytes += result->bytes;
      stats.delta_bytes += result->wire_bytes;
      return result;
    }
    if (!sticky.ok()) return sticky;  // the connection broke: no full pull on it
    WS_DEBUG("subscriber: pulling in full: {}", result.status().to_string());
    delta_fell_back = true;
  }
  for (;;) {
    if (cancel.active() && cancel.requested()) return cancelled("pulling a version newer than", newer_than);
    auto result = attempt(plan, newer_than, pull_options, hasher, staged);
    if (result.ok() && trusted_key) {
      Status verified = verify_signature(plan, result->version);
      if (verified.ok()) {
        result->signature_verified = true;
      } else {
        result = verified;  // judged below like any failed attempt
      }
    }
    if (result.ok()) {
      result->retries = retries;
      result->wait_seconds = std::chrono::duration<double>(waited).count();
      result->seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start - waited).count();
      held_version = result->version;
      result->wire_bytes = result->bytes;
      ++stats.pulls;
      if (delta_fell_back) ++stats.delta_fallbacks;
      if (staged) ++stats.staged_pulls;
      stats.retries += retries;
      stats.bytes += result->bytes;
      return result;
    }
    const ErrorCode code = result.status().code();
    if (code == ErrorCode::kNotReady) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= wait_until) return result.status();
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - now);
      auto latest = wait_newer(newer_than, std::max(left, std::chrono::milliseconds(1)), cancel);
      if (!latest.ok() && latest.status().code() == ErrorCode::kCancelled) return latest.status();
      waited += std::chrono::steady_clock::now() - now;
      if (!sticky.ok()) return sticky;  // the wait broke the connection
      // A wait longer than one query allows ends in kTimeout: query again until wait_until.
      if (!latest.ok() && latest.status().code() != ErrorCode::kTimeout) return latest.status();
      continue;
    }
    // An exact version that was revoked is gone for good here: the caller
    // (a SubscriberGroup) picks a newer one.
    const bool retry_revoked = code == ErrorCode::kVersionRevoked && !exact;
    if ((retry_revoked || code == ErrorCode::kChecksumMismatch) &&
        static_cast<int>(retries) < options.max_retries) {
      ++retries;
      WS_DEBUG("subscriber: retrying pull: {}", result.status().to_string());
      continue;
    }
    return result.status();
  }
}

Result<PullResult> Subscriber::Impl::delta_attempt(const PullPlan::State& plan, std::uint64_t newer_than,
                                                   const PullOptions& pull_options, std::uint64_t latest) {
  detail::FetchDeltaMsg request;
  request.have = *pull_options.delta_base;
  request.at_least = std::max(latest, newer_than + 1);
  request.max_bytes = plan.bytes;  // what the full pull moves
  request.wait_ms = detail::kMaxDeltaWaitMs;
  if (request.at_least <= request.have) {
    return Status(ErrorCode::kNotReady,
                  "the destination already holds version " + std::to_string(request.have));
  }
  auto chain = note(control.fetch_delta(request, delta_bytes));
  if (!chain.ok()) return chain.status();
  // Each link costs a slot-sized decode and XOR: a chain longer than the
  // publisher keeps, or than kMaxDeltaChainApplied, is refused before any is
  // applied (not sticky: the stream is in step; the pull goes on in full).
  const std::size_t links = chain->links.size();
  const std::uint32_t most = delta_history > 0 ? std::min(delta_history, detail::kMaxDeltaChainApplied)
                                               : detail::kMaxDeltaChainApplied;
  if (links > most) {
    return Status(ErrorCode::kProtocolError,
                  "the publisher sent a chain of " + std::to_string(links) + " deltas; at most " +
                      std::to_string(most) + " are applied (its delta_history is " +
                      std::to_string(delta_history) + ", the bound " +
                      std::to_string(detail::kMaxDeltaChainApplied) + "): pulling in full");
  }
  if (pull_options.on_start) pull_options.on_start(chain->links.back().to, false);
  // Between links: the pull's cancellation, and the I/O timeout for the whole chain.
  const auto apply_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(io_timeout_ms);
  const Cancellation& cancel = pull_options.cancel;
  const auto before_link = [&](std::size_t link) -> Status {
    if (cancel.active() && cancel.requested())
      return cancelled("applying deltas for a version newer than", newer_than);
    if (std::chrono::steady_clock::now() > apply_until) {
      return Status(ErrorCode::kTimeout, "applying " + std::to_string(links) +
                                             " deltas took longer than the I/O timeout (" +
                                             std::to_string(link) + " applied): pulling in full");
    }
    return Status();
  };
  detail::DeltaChain decoded;
  decoded.element_bytes = chain->element_bytes;
  decoded.links.reserve(links);
  for (const auto& link : chain->links) decoded.links.push_back({link.from, link.to, link.bytes});
  auto sum = detail::apply_delta_chain(decoded, delta_bytes, layout.total_bytes(), plan.pieces, delta_buffers,
                                       version_key, before_link);
  if (!sum.ok()) return sum.status();
  const detail::DeltaLinkHeader& last = chain->links.back();
  if (*sum != last.checksum) {
    return Status(ErrorCode::kChecksumMismatch,
                  "version " + std::to_string(last.to) + " rebuilt from deltas from version " +
                      std::to_string(request.have) +
                      " does not match its checksum (the destination did not hold " +
                      "that version, or the bytes were changed in transit)");
  }
  PullResult out;
  out.version = last.to;
  out.bytes = plan.bytes;
  out.delta = true;
  out.wire_bytes = delta_bytes.size();
  out.checksum_verified = true;
  out.checksum = last.checksum;
  if (pull_options.on_progress) pull_options.on_progress(out.bytes, out.bytes);
  return out;
}

Result<PullResult> Subscriber::pull(const Destination& destination, const PullOptions& options) try {
  if (!impl_->sticky.ok()) return impl_->sticky;
  auto plan = impl_->plan_for(destination);
  if (!plan.ok()) return plan.status();
  return impl_->pull(**plan, options);
} catch (const std::exception& e) {
  // Possibly thrown mid-transfer (e.g. by on_progress): the stream's state is unknown now.
  Status failed(ErrorCode::kInternal, std::string("Subscriber::pull: ") + e.what());
  impl_->note_status(failed, /*force=*/true);
  return failed;
}

Result<PullPlan> Subscriber::prepare(const Destination& destination) try {
  if (!impl_->sticky.ok()) return impl_->sticky;
  auto state = impl_->plan_for(destination);
  if (!state.ok()) return state.status();
  if (Status s = impl_->ensure_registered(**state); !s.ok()) return s;
  PullPlan plan;
  plan.state_ = std::move(*state);
  return plan;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::prepare: ") + e.what());
}

Result<PullResult> Subscriber::pull(const PullPlan& plan, const PullOptions& options) try {
  if (!impl_->sticky.ok()) return impl_->sticky;
  if (!plan.state_ || plan.state_->owner != impl_.get()) {
    return Status(ErrorCode::kInvalidArgument, "this PullPlan was not prepared by this Subscriber");
  }
  if (Status s = impl_->ensure_registered(*plan.state_); !s.ok()) return s;
  return impl_->pull(*plan.state_, options);
} catch (const std::exception& e) {
  Status failed(ErrorCode::kInternal, std::string("Subscriber::pull: ") + e.what());
  impl_->note_status(failed, /*force=*/true);
  return failed;
}

Status Subscriber::register_memory(void* base, std::size_t bytes) try {
  if (!impl_->sticky.ok()) return impl_->sticky;
  if (base == nullptr || bytes == 0)
    return Status(ErrorCode::kInvalidArgument, "register_memory: empty region");
  return impl_->channel->register_region(base, bytes);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::register_memory: ") + e.what());
}

Status Subscriber::release_memory(void* base, std::size_t bytes) try {
  if (base == nullptr || bytes == 0)
    return Status(ErrorCode::kInvalidArgument, "release_memory: empty region");
  const std::size_t dropped = impl_->channel->release_region(base, bytes);
  WS_DEBUG("subscriber: released {} registration(s) in [{}, +{})", dropped, base, bytes);
  return Status();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Subscriber::release_memory: ") + e.what());
}

}  // namespace weightsync
