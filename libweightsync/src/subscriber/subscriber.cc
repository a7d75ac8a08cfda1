// Subscriber: connect + negotiate, the public calls, and the pull loop: the
// wait for a newer version, the delta pull and the retries of whole attempts
// (docs/consistency.md).
#include "weightsync/subscriber.h"

#include <algorithm>
#include <optional>

#include "auth/signing.h"
#include "common/deadline.h"
#include "common/log.h"
#include "subscriber/control_client.h"
#include "subscriber/negotiation.h"
#include "subscriber/pull_histogram.h"
#include "subscriber/subscriber_impl.h"
#include "subscriber/subscriber_settings.h"
#include "wire/stream_messages.h"

namespace weightsync {

// ---- Subscriber::Impl: errors ----

bool Subscriber::Impl::breaks_connection(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kConnectionLost:
    case ErrorCode::kProtocolError:
    case ErrorCode::kTimeout:
    case ErrorCode::kAuthFailed:
    case ErrorCode::kInternal: return true;
    default: return false;
  }
}

void Subscriber::Impl::note_status(const Status& s, bool force) {
  if (!s.ok() && (force || breaks_connection(s)) && sticky.ok()) {
    sticky = s;
    WS_WARN("subscriber: connection to the publisher is unusable: {}", sticky.to_string());
  }
}

// ---- Subscriber ----

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
  if (!options.adapter.empty()) {
    if (std::string why = detail::stream_name_problem(options.adapter); !why.empty()) {
      return Status(ErrorCode::kInvalidArgument, "SubscriberOptions::adapter: " + why);
    }
  }
  auto control = detail::ControlClient::connect(
      *target, settings.secret.value, options.client_name, settings.connect_timeout_ms.value,
      settings.io_timeout_ms.value, settings.integrity.value, settings.encryption.value);
  if (!control.ok()) return control.status();
  if (!options.adapter.empty()) {
    // Bound to that adapter's ring for the whole session (docs/protocol.md, "Named streams").
    if (Status s = control->select_stream(options.adapter); !s.ok()) {
      return Status(s.code(), "adapter '" + options.adapter + "' at " + address + ": " + s.message());
    }
  }
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
  s.held_version = impl_->held_version;
  return s;
}

SubscriberStats Subscriber::stats_snapshot() const {
  std::lock_guard<std::mutex> lock(impl_->shared_mu);
  return impl_->shared_stats;
}

void Subscriber::Impl::share_stats() {
  SubscriberStats s = stats;
  s.registrations = staging ? staging->registrations() : channel->registrations();
  s.registrations_released = channel->released_registrations();
  s.held_version = held_version;
  std::lock_guard<std::mutex> lock(shared_mu);
  shared_stats = s;
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

// ---- Subscriber::Impl: the pull loop ----

Result<PullResult> Subscriber::Impl::pull(PullPlan::State& plan, const PullOptions& pull_options) {
  PullRun run(plan, pull_options);
  run.start = std::chrono::steady_clock::now();
  run.staged = plan.kind == MemoryKind::kCuda && !channel->writes_device_memory();
  if (run.staged) {
    if (Status s = ensure_staging(); !s.ok()) return s;
  }
  run.exact = pull_options.version.has_value();
  if (Status s = check_pull(run); !s.ok()) return s;
  run.newer_than = run.exact ? *pull_options.version - 1 : pull_options.newer_than.value_or(held_version);
  // A wait too long for the clock never ends: the pull waits as long as the
  // connection lives, one bounded query at a time.
  run.wait_until = detail::wait_end(run.start, pull_options.wait);
  detail::StreamHasher hasher(version_key);
  if (pull_options.delta_base && deltas_offered && !run.exact && !plan.partial &&
      plan.kind == MemoryKind::kHost && *pull_options.delta_base > 0) {
    if (auto delta = pull_by_delta(run)) return std::move(*delta);
    run.delta_fell_back = true;
  }
  return pull_in_full(run, hasher);
}

Status Subscriber::Impl::check_pull(const PullRun& run) const {
  if (run.exact && *run.pull_options.version == 0)
    return Status(ErrorCode::kInvalidArgument, "version 0 is never published");
  if (trusted_key && (run.plan.partial || run.plan.kind != MemoryKind::kHost)) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string("a ") + (run.plan.partial ? "partial pull" : "pull into CUDA memory") +
                      " cannot be checked against the trainer's signature (it digests whole versions in host "
                      "memory): pull whole versions into host memory, or unset WEIGHTSYNC_TRUSTED_KEY");
  }
  return Status();
}

std::optional<Result<PullResult>> Subscriber::Impl::pull_by_delta(PullRun& run) {
  const PullOptions& pull_options = run.pull_options;
  // Only once a newer version exists: the wait is the pull's.
  auto latest = pull_options.wait.count() > 0
                    ? wait_newer(run.newer_than, pull_options.wait, pull_options.cancel)
                    : note(control.query_version(run.newer_than, 0, false));
  if (!latest.ok()) {
    if (latest.status().code() == ErrorCode::kTimeout) {
      return Status(ErrorCode::kNotReady, latest.status().message());
    }
    return latest.status();
  }
  run.waited += std::chrono::steady_clock::now() - run.start;
  if (*latest <= run.newer_than) {
    return Status(ErrorCode::kNotReady, "no version newer than " + std::to_string(run.newer_than) +
                                            " (latest: " + std::to_string(*latest) + ")");
  }
  auto result = delta_attempt(run.plan, run.newer_than, pull_options, *latest);
  if (result.ok() && trusted_key) {
    Status verified = verify_signature(run.plan, result->version);
    if (verified.ok()) {
      result->signature_verified = true;
    } else if (verified.code() == ErrorCode::kAuthFailed || !sticky.ok()) {
      return verified;  // the full pull would meet the same signature, or no connection
    } else {
      result = verified;  // bytes that differ: pull in full instead
    }
  }
  if (result.ok()) {
    record_delta_pull(run, *result);
    return result;
  }
  if (!sticky.ok()) return sticky;  // the connection broke: no full pull on it
  WS_DEBUG("subscriber: pulling in full: {}", result.status().to_string());
  return std::nullopt;
}

Result<PullResult> Subscriber::Impl::pull_in_full(PullRun& run, detail::StreamHasher& hasher) {
  const Cancellation& cancel = run.pull_options.cancel;
  for (;;) {
    if (cancel.active() && cancel.requested())
      return cancelled("pulling a version newer than", run.newer_than);
    auto result = attempt(run.plan, run.newer_than, run.pull_options, hasher, run.staged);
    if (result.ok() && trusted_key) {
      Status verified = verify_signature(run.plan, result->version);
      if (verified.ok()) {
        result->signature_verified = true;
      } else {
        result = verified;  // judged below like any failed attempt
      }
    }
    if (result.ok()) {
      record_full_pull(run, *result);
      return result;
    }
    const ErrorCode code = result.status().code();
    if (code == ErrorCode::kNotReady) {
      if (Status s = wait_after_not_ready(run, result.status()); !s.ok()) return s;
      continue;
    }
    // An exact version that was revoked is gone for good here: the caller
    // (a SubscriberGroup) picks a newer one.
    const bool retry_revoked = code == ErrorCode::kVersionRevoked && !run.exact;
    if ((retry_revoked || code == ErrorCode::kChecksumMismatch) &&
        static_cast<int>(run.retries) < options.max_retries) {
      ++run.retries;
      WS_DEBUG("subscriber: retrying pull: {}", result.status().to_string());
      continue;
    }
    return result.status();
  }
}

Status Subscriber::Impl::wait_after_not_ready(PullRun& run, const Status& not_ready) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= run.wait_until) return not_ready;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(run.wait_until - now);
  auto latest =
      wait_newer(run.newer_than, std::max(left, std::chrono::milliseconds(1)), run.pull_options.cancel);
  if (!latest.ok() && latest.status().code() == ErrorCode::kCancelled) return latest.status();
  run.waited += std::chrono::steady_clock::now() - now;
  if (!sticky.ok()) return sticky;  // the wait broke the connection
  // A wait longer than one query allows ends in kTimeout: query again until wait_until.
  if (!latest.ok() && latest.status().code() != ErrorCode::kTimeout) return latest.status();
  return Status();
}

void Subscriber::Impl::record_delta_pull(const PullRun& run, PullResult& result) {
  result.wait_seconds = std::chrono::duration<double>(run.waited).count();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run.start - run.waited).count();
  held_version = result.version;
  ++stats.pulls;
  detail::count_pull_seconds(stats, result.seconds);
  ++stats.delta_pulls;
  stats.bytes += result.bytes;
  stats.delta_bytes += result.wire_bytes;
  share_stats();
}

void Subscriber::Impl::record_full_pull(const PullRun& run, PullResult& result) {
  result.retries = run.retries;
  result.wait_seconds = std::chrono::duration<double>(run.waited).count();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run.start - run.waited).count();
  held_version = result.version;
  result.wire_bytes = result.bytes;
  ++stats.pulls;
  detail::count_pull_seconds(stats, result.seconds);
  if (run.delta_fell_back) ++stats.delta_fallbacks;
  if (run.staged) ++stats.staged_pulls;
  stats.retries += run.retries;
  stats.bytes += result.bytes;
  share_stats();
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
