// Relay: the forwarding thread (upstream pull straight into an own slot,
// commit under the upstream's version and checksum) and failover.
#include "weightsync/relay.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/log.h"
#include "memory/prefault.h"
#include "publisher/publisher_core.h"
#include "relay/upstream_link.h"
#include "weightsync/subscriber.h"

namespace weightsync {
namespace {

using Clock = std::chrono::steady_clock;

// How long one wait for a new upstream version lasts before the thread looks
// at its stop flag again.
constexpr std::chrono::milliseconds kWaitSlice{500};
// Least time between two "every upstream unreachable" warnings.
constexpr std::chrono::seconds kWarnEvery{5};
// Announced versions in a row that could then not be leased (VERSION said
// newer, the pull found nothing newer) before the upstream counts as lying.
// One is an honest race (a streamed version abandoned upstream meanwhile).
constexpr int kMaxPhantomVersions = 3;

// Thrown from on_progress to cut a pull short when the relay stops.
struct Stopping : std::runtime_error {
  Stopping() : std::runtime_error("relay stopping") {}
};

}  // namespace

class Relay::Impl {
 public:
  Impl(RelayOptions o, std::unique_ptr<detail::UpstreamLink> l) : options(std::move(o)), link(std::move(l)) {}

  RelayOptions options;
  std::unique_ptr<detail::UpstreamLink> link;        // forwarding thread only
  std::unique_ptr<detail::PublisherCore> publisher;  // the relay's own ring and server
  std::thread thread;
  std::atomic<bool> stopping{false};

  mutable std::mutex mu;
  std::condition_variable cv;  // latest version changed, or stopping
  RelayStats counters;         // guarded by mu (publisher stats are added on read)

  // Floor for the next upstream version: what we hold, or a version the ring skipped.
  std::uint64_t skipped_up_to = 0;
  bool lost_upstream = false;
  // Set by forward_once when the upstream sent something the relay cannot
  // use (a version it then did not deliver, an unverified version): the
  // upstream is dropped and the next one tried, as for a dead one.
  bool upstream_fault = false;
  int quick_retries = 0;     // pipelined: failed pulls retried at once since the last success
  int phantom_versions = 0;  // announced but not leasable, in a row (this upstream)
  Clock::time_point last_warn{};

  void run();
  // The upstream announced `version` (relay lag, metrics): when, for forward_lag_seconds.
  Clock::time_point note_announced(std::uint64_t version) {
    std::lock_guard<std::mutex> lock(mu);
    counters.upstream_latest_version = std::max(counters.upstream_latest_version, version);
    return Clock::now();
  }
  // `version` committed here: the counters, and its lag since `announced`.
  void note_forwarded(std::uint64_t version, std::uint64_t bytes, Clock::time_point announced) {
    std::lock_guard<std::mutex> lock(mu);
    ++counters.versions_forwarded;
    counters.bytes_received += bytes;
    counters.latest_version = version;
    // The pull may lease a newer version than the one announced (it takes the
    // newest): the upstream has announced at least what we forwarded.
    counters.upstream_latest_version = std::max(counters.upstream_latest_version, version);
    counters.forward_lag_seconds = std::chrono::duration<double>(Clock::now() - announced).count();
  }
  // One wait + forward. OK also when nothing new came; not OK: the upstream's
  // error (with upstream_fault set when the relay itself found it at fault).
  // Throws only for the relay's own failures (its ring refusing a slot or a
  // commit for a reason not the upstream's), which end forwarding.
  Status forward_once(Subscriber& sub);
  // Serves the trainer's signature block of `version` as the upstream
  // served it (or none, if it has none), before `version` is committed.
  void forward_signature(Subscriber& sub, std::uint64_t version);
  Status fault(Status s) {
    upstream_fault = true;
    return s;
  }
  // Forwarding ended for good: say so in stats() and to every leaf.
  void stopped_forwarding(const std::string& why);
  void reconnect();
  void sleep_for(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, d, [&] { return stopping.load(); });
  }
  void set_upstream_state(const Status& error) {
    std::lock_guard<std::mutex> lock(mu);
    counters.upstream = link->address();
    counters.upstream_connected = link->connected();
    if (!error.ok()) counters.upstream_error = error.to_string();
  }
};

Relay::Relay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Relay::~Relay() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->link.reset();       // closes the upstream connection
  impl_->publisher.reset();  // closes downstream connections, joins its threads
}

Result<std::unique_ptr<Relay>> Relay::create(RelayOptions options) try {
  if (options.upstreams.empty()) {
    return Status(ErrorCode::kInvalidArgument, "RelayOptions::upstreams is empty: name at least one source");
  }
  if (options.chunk_bytes < (64u << 10)) {
    return Status(ErrorCode::kInvalidConfig, "RelayOptions::chunk_bytes must be at least 64 KiB, not " +
                                                 std::to_string(options.chunk_bytes));
  }
  if (options.publisher.slot_memory != MemoryKind::kHost) {
    return Status(ErrorCode::kInvalidConfig,
                  "a relay's slots are host memory (PublisherOptions::slot_memory)");
  }
  SubscriberOptions sub_options = options.subscriber;
  sub_options.verify_checksum = true;  // a relay forwards only what it verified
  if (options.pipelined) {
    // Read upstream versions while they arrive there too, and never retry a
    // pull into a slot others already stream from: a failed or revoked pull
    // abandons the in-progress version and the thread starts again.
    sub_options.accept_streaming = true;
    sub_options.max_retries = 0;
  }
  if (sub_options.client_name == SubscriberOptions{}.client_name) sub_options.client_name = "relay";
  auto link = std::make_unique<detail::UpstreamLink>(options.upstreams, sub_options);
  if (Status s = link->connect_first(); !s.ok()) return s;
  Subscriber& upstream = *link->subscriber();

  PublisherOptions pub_options = options.publisher;
  const bool upstream_checksums = upstream.publisher_checksums();
  if (!pub_options.checksum) pub_options.checksum = upstream_checksums;
  auto publisher = detail::PublisherCore::create(upstream.layout(), pub_options);
  if (!publisher.ok()) return publisher.status();
  (*publisher)->enable_signature_forwarding();
  if (options.prefault_slots) {
    // Before forwarding starts: nothing else writes the ring, and the fallback
    // writes zero onto zero-filled pages (a reader mapping them sees no change).
    detail::SlotRing& ring = *(*publisher)->ring;
    for (std::uint32_t s = 0; s < ring.slot_count(); ++s) {
      detail::prefault_writable(ring.slot_data(s), ring.slot_bytes());
    }
  }
  if (*pub_options.checksum && !upstream_checksums) {
    WS_WARN(
        "relay: upstream {} serves no checksums; this relay hashes what it received itself "
        "(PublisherOptions::checksum): leaves verify the relay's copy, not the trainer's bytes",
        link->address());
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(link));
  impl->publisher = std::move(*publisher);
  impl->counters.upstream = impl->link->address();
  WS_INFO("relay: serving {} from upstream {} ({} sources; checksums {}; {} mode)",
          impl->publisher->address(), impl->counters.upstream, impl->options.upstreams.size(),
          impl->publisher->checksums ? "forwarded" : "off",
          impl->options.pipelined ? "pipelined" : "whole-version");
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    // Named, so that its CPU can be told from the serving threads' (top -H,
    // /proc/PID/task/*/comm; scripts/relay-cpu-figures.py).
    ::pthread_setname_np(::pthread_self(), "ws-relay-fwd");
    raw->run();
  });
  return std::unique_ptr<Relay>(new Relay(std::move(impl)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Relay::create: ") + e.what());
}

void Relay::Impl::run() {
  try {
    while (!stopping) {
      if (!link->connected()) {
        reconnect();
        continue;
      }
      upstream_fault = false;
      Status s = forward_once(*link->subscriber());
      if (stopping) break;
      if (!s.ok()) {
        Subscriber* sub = link->subscriber();
        if (!sub->status().ok() || upstream_fault) {
          WS_WARN("relay: upstream {} failed ({}); failing over", link->address(), s.to_string());
          link->drop();
          phantom_versions = 0;
          lost_upstream = true;
          set_upstream_state(s);
        } else if (options.pipelined && ++quick_retries <= std::max(options.subscriber.max_retries, 0) &&
                   (s.code() == ErrorCode::kVersionRevoked || s.code() == ErrorCode::kChecksumMismatch)) {
          // Pipelined pulls are not retried inside pull() (never into a slot
          // being streamed): the relay retries them here, at once, as often
          // as the subscriber would have, with a fresh slot each time.
          WS_DEBUG("relay: pull from {} failed ({}); retrying", link->address(), s.to_string());
        } else {
          // Not sticky (revoked or corrupt past the retries): try again shortly.
          WS_DEBUG("relay: pull from {} failed: {}", link->address(), s.to_string());
          set_upstream_state(s);
          quick_retries = 0;
          sleep_for(std::chrono::milliseconds(10));
        }
      } else {
        quick_retries = 0;
      }
    }
  } catch (const std::exception& e) {
    stopped_forwarding(e.what());
  } catch (...) {
    stopped_forwarding("unknown exception");
  }
}

void Relay::Impl::stopped_forwarding(const std::string& why) {
  const std::string error = "relay: forwarding stopped: " + why + " (holding version " +
                            std::to_string(publisher->latest_version()) +
                            "; no newer version will come from this relay: use another source)";
  {
    std::lock_guard<std::mutex> lock(mu);
    counters.running = false;
    counters.error = error;
  }
  WS_ERROR("{}", error);
  // Leaves waiting for a newer version, or asking for one later, are told
  // (kConnectionLost) instead of being served the held version as current.
  publisher->retire(error);
  cv.notify_all();
}

void Relay::Impl::reconnect() {
  Status s = link->connect_next(publisher->layout);
  if (s.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (lost_upstream) ++counters.failovers;
    }
    lost_upstream = false;
    WS_INFO("relay: now forwarding from {} (holding version {})", link->address(),
            publisher->latest_version());
    set_upstream_state(Status());
    return;
  }
  set_upstream_state(s);
  if (!link->round_failed()) return;  // try the next address at once
  const auto now = Clock::now();
  if (last_warn == Clock::time_point{} || now - last_warn >= kWarnEvery) {
    last_warn = now;
    WS_WARN("relay: no upstream reachable ({}); still serving version {}; retrying", s.to_string(),
            publisher->latest_version());
  }
  sleep_for(link->next_backoff());
}

Status Relay::Impl::forward_once(Subscriber& sub) {
  const std::uint64_t floor = std::max(publisher->latest_version(), skipped_up_to);
  auto next = sub.wait_for_version(floor, kWaitSlice);
  if (!next.ok()) {
    if (next.status().code() == ErrorCode::kTimeout && sub.status().ok()) return Status();
    return next.status();
  }
  const Clock::time_point announced = note_announced(*next);
  auto writer = publisher->begin_forwarding(*next);
  if (!writer.ok()) {
    if (writer.status().code() == ErrorCode::kBusy) {  // kSkip policy, every slot read by someone
      skipped_up_to = *next;
      std::lock_guard<std::mutex> lock(mu);
      ++counters.versions_skipped;
      return Status();
    }
    throw std::runtime_error("reserving a slot for version " + std::to_string(*next) + ": " +
                             writer.status().to_string());
  }
  PullOptions pull;
  pull.newer_than = floor;
  // Pipelined: expose the slot to streaming readers once the upstream lease
  // names the version, and advance its watermark every chunk_bytes.
  const bool pipelined = options.pipelined;
  const WeightLayout& layout = publisher->layout;
  bool streaming = false;
  std::uint64_t marked = 0;        // payload bytes covered by the last watermark
  std::size_t tensor = 0;          // the tensor payload byte `marked` falls in
  std::uint64_t tensor_start = 0;  // payload bytes before that tensor
  detail::ForwardingWriter* slot = &*writer;
  std::uint64_t pulling = *next;  // the version the upstream leased
  pull.on_start = [&, slot](std::uint64_t version, bool) {
    pulling = version;
    if (!pipelined) return;
    if (streaming) throw std::runtime_error("relay: a pull restarted into a slot already being streamed");
    Status s = slot->begin_streaming(version);
    if (!s.ok()) throw std::runtime_error("relay: " + s.to_string());
    streaming = true;
  };
  pull.on_progress = [&, slot](std::uint64_t received, std::uint64_t total) {
    if (stopping) throw Stopping();
    if (options.on_upstream_progress) options.on_upstream_progress(pulling, received, total);
    if (!streaming || (received - marked < options.chunk_bytes && received < total)) return;
    marked = received;
    if (received >= total) {
      slot->advance_watermark(slot->size());
      return;
    }
    // Payload bytes (the plan's, padding skipped) -> slot offset.
    const auto& tensors = layout.tensors();
    while (tensor < tensors.size() && tensor_start + tensors[tensor].bytes <= received) {
      tensor_start += tensors[tensor].bytes;
      ++tensor;
    }
    const std::uint64_t offset =
        tensor < tensors.size() ? tensors[tensor].offset + (received - tensor_start) : slot->size();
    slot->advance_watermark(offset);
  };
  auto pulled = sub.pull(Destination::contiguous(writer->data(), writer->size()), pull);
  if (!pulled.ok()) {
    // The writer abandons the slot. kNotReady: nothing newer after all; an
    // upstream that keeps announcing versions it cannot lease is lying (it
    // would spin this thread and churn the relay's slots): fail over.
    if (pulled.status().code() == ErrorCode::kNotReady) {
      if (++phantom_versions < kMaxPhantomVersions) return Status();
      phantom_versions = 0;
      return fault(Status(ErrorCode::kProtocolError, "upstream announced version " + std::to_string(*next) +
                                                         " " + std::to_string(kMaxPhantomVersions) +
                                                         " times in a row but had nothing newer than " +
                                                         std::to_string(floor) + " to lease"));
    }
    return pulled.status();
  }
  phantom_versions = 0;
  if (sub.publisher_checksums() && !pulled->checksum_verified) {
    return fault(Status(ErrorCode::kProtocolError,
                        "upstream version " + std::to_string(pulled->version) + " arrived unverified"));
  }
  if (pulled->version < writer->version()) {
    // Told of version *next, then leased an older one: the upstream lied
    // (a pipelined relay renames the slot to the leased version instead).
    return fault(
        Status(ErrorCode::kProtocolError, "upstream announced version " + std::to_string(writer->version()) +
                                              " but delivered version " + std::to_string(pulled->version)));
  }
  if (options.before_commit) options.before_commit(pulled->version, writer->data(), writer->size());
  forward_signature(sub, pulled->version);
  auto committed = writer->commit_as(pulled->version, pulled->checksum_verified
                                                          ? std::optional<std::uint64_t>(pulled->checksum)
                                                          : std::nullopt);
  if (!committed.ok()) throw std::runtime_error("committing: " + committed.status().to_string());
  note_forwarded(pulled->version, pulled->bytes, announced);
  cv.notify_all();
  return Status();
}

void Relay::Impl::forward_signature(Subscriber& sub, std::uint64_t version) {
  auto block = sub.signature_block(version);
  if (block.ok()) {
    publisher->forward_signature(version, std::move(*block));
    return;
  }
  publisher->forward_signature(version, std::nullopt);
  if (block.status().code() != ErrorCode::kInvalidConfig) {  // kInvalidConfig: the upstream signs nothing
    WS_WARN("relay: version {} is forwarded without the trainer's signature: {}", version,
            block.status().to_string());
  }
}

std::string Relay::address() const {
  return impl_->publisher->address();
}

std::uint64_t Relay::latest_version() const {
  return impl_->publisher->latest_version();
}

Result<std::uint64_t> Relay::wait_for_version(std::uint64_t newer_than, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  const bool got = impl_->cv.wait_for(lock, timeout, [&] {
    return impl_->publisher->latest_version() > newer_than || impl_->stopping || !impl_->counters.running;
  });
  const std::uint64_t latest = impl_->publisher->latest_version();
  if (latest <= newer_than && !impl_->counters.running) {
    return Status(ErrorCode::kConnectionLost, impl_->counters.error);
  }
  if (!got || latest <= newer_than) {
    return Status(ErrorCode::kTimeout, "relay holds no version newer than " + std::to_string(newer_than) +
                                           " after " + std::to_string(timeout.count()) +
                                           " ms (latest: " + std::to_string(latest) + ")");
  }
  return latest;
}

RelayStats Relay::stats() const {
  RelayStats out;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    out = impl_->counters;
  }
  out.latest_version = impl_->publisher->latest_version();
  out.publisher = impl_->publisher->stats();
  return out;
}

}  // namespace weightsync
