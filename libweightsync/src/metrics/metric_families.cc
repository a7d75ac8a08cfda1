// metric_families.cc: the weightsync_* metric names, types and help texts,
// filled from the stats structs (docs/configuration.md, "Metrics").
#include "metrics/metric_families.h"

#include <utility>

namespace weightsync::detail {
namespace {

MetricLabels with_source(const std::string& source) {
  return {{"source", source}};
}

}  // namespace

prometheus::ClientMetric& FamilySet::add(const std::string& name, const std::string& help,
                                         prometheus::MetricType type, const MetricLabels& labels) {
  prometheus::MetricFamily& family = families_[name];
  if (family.name.empty()) {
    family.name = name;
    family.help = help;
    family.type = type;
  }
  family.metric.emplace_back();
  prometheus::ClientMetric& metric = family.metric.back();
  for (const auto& [key, value] : labels) metric.label.push_back({key, value});
  return metric;
}

void FamilySet::counter(const std::string& name, const std::string& help, const MetricLabels& labels,
                        double value) {
  add(name, help, prometheus::MetricType::Counter, labels).counter.value = value;
}

void FamilySet::gauge(const std::string& name, const std::string& help, const MetricLabels& labels,
                      double value) {
  add(name, help, prometheus::MetricType::Gauge, labels).gauge.value = value;
}

void FamilySet::histogram(const std::string& name, const std::string& help, const MetricLabels& labels,
                          const SubscriberStats& stats) {
  auto& h = add(name, help, prometheus::MetricType::Histogram, labels).histogram;
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b + 1 < kPullSecondsBuckets; ++b) {
    cumulative += stats.pull_seconds_counts[b];
    h.bucket.push_back({cumulative, kPullSecondsBounds[b]});
  }
  h.sample_count = cumulative + stats.pull_seconds_counts[kPullSecondsBuckets - 1];  // "+Inf"
  h.sample_sum = stats.pull_seconds_sum;
}

std::vector<prometheus::MetricFamily> FamilySet::take() {
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families_.size());
  for (auto& entry : families_) out.push_back(std::move(entry.second));
  families_.clear();
  return out;
}

void collect_publisher(FamilySet& out, const std::string& source, const PublisherStats& s,
                       std::uint64_t latest_version) {
  const MetricLabels l = with_source(source);
  const std::string p = "weightsync_publisher_";
  out.counter(p + "versions_published_total", "Versions committed.", l, s.versions_published);
  out.counter(p + "versions_skipped_total", "Versions not published: full ring under the skip policy.", l,
              s.versions_skipped);
  out.gauge(p + "latest_version", "Newest committed version (0 before the first).", l, latest_version);
  out.counter(p + "served_bytes_total", "Payload bytes served to subscribers.", l, s.bytes_served);
  out.counter(p + "leases_granted_total", "Read leases granted.", l, s.leases_granted);
  out.counter(p + "leases_revoked_total", "Leases taken back to make room (expired ones included).", l,
              s.leases_revoked);
  out.counter(p + "leases_expired_total", "Revoked leases older than the lease timeout.", l,
              s.leases_expired);
  out.gauge(p + "leases_active", "Live leases now.", l, s.leases_active);
  out.counter(p + "connections_accepted_total", "Connections accepted.", l, s.connections_accepted);
  out.gauge(p + "connections_active", "Open connections now.", l, s.connections_active);
  out.counter(p + "connections_refused_total", "Connections turned away at a cap.", l, s.connections_refused);
  out.gauge(p + "handshakes_active", "Connections not yet authenticated.", l, s.handshakes_active);
  out.counter(p + "handshakes_timed_out_total", "Connections closed for not authenticating in time.", l,
              s.handshakes_timed_out);
  out.counter(p + "auth_failures_total", "Failed authentications.", l, s.auth_failures);
  out.counter(p + "protocol_errors_total", "Connections closed for bad input.", l, s.protocol_errors);
  out.counter(p + "sessions_idle_closed_total", "Sessions closed by the idle timeout.", l,
              s.sessions_idle_closed);
  out.counter(p + "deltas_computed_total", "Delta versions encoded.", l, s.deltas_computed);
  out.counter(p + "deltas_served_total", "Delta chains sent.", l, s.deltas_served);
  out.gauge(p + "slowest_reader_version", "The version slowest_reader_seconds is about.", l,
            s.slowest_reader_version);
  out.gauge(p + "slowest_reader_seconds",
            "Longest lease (grant to release) among the readers of slowest_reader_version.", l,
            s.slowest_reader_seconds);
  out.gauge(p + "serving", "1 while the server thread serves, 0 after it stopped on an error.", l,
            s.serving ? 1 : 0);
}

void collect_subscriber(FamilySet& out, const MetricLabels& l, const std::string& transport,
                        const SubscriberStats& s) {
  const std::string p = "weightsync_subscriber_";
  out.counter(p + "pulls_total", "Successful pulls (versions pulled).", l, s.pulls);
  out.counter(p + "pulled_bytes_total", "Payload bytes delivered by successful pulls.", l, s.bytes);
  out.counter(p + "pull_retries_total", "Discarded attempts (revoked, torn, corrupt) of successful pulls.", l,
              s.retries);
  MetricLabels lt = l;
  lt.emplace_back("transport", transport);
  out.histogram(p + "pull_duration_seconds", "Transfer time of successful pulls, waiting excluded.", lt, s);
  out.gauge(p + "held_version", "Version last delivered (0 before the first).", l, s.held_version);
  out.counter(p + "delta_pulls_total", "Pulls delivered by delta chains.", l, s.delta_pulls);
  out.counter(p + "delta_fallbacks_total", "Pulls that asked for deltas and pulled in full.", l,
              s.delta_fallbacks);
  out.counter(p + "delta_received_bytes_total", "Compressed delta bytes received.", l, s.delta_bytes);
  const double asked = static_cast<double>(s.delta_pulls) + static_cast<double>(s.delta_fallbacks);
  out.gauge(p + "delta_hit_ratio", "delta_pulls / (delta_pulls + delta_fallbacks); 0 before any.", l,
            asked > 0 ? static_cast<double>(s.delta_pulls) / asked : 0.0);
  out.counter(p + "signatures_refused_total", "Versions refused for their signature.", l,
              s.signatures_refused);
  out.counter(p + "registrations_total", "Memory registrations made by the transport.", l, s.registrations);
}

void collect_relay(FamilySet& out, const std::string& source, const RelayStats& s) {
  const MetricLabels l = with_source(source);
  const std::string p = "weightsync_relay_";
  out.counter(p + "versions_forwarded_total", "Versions received and served downstream.", l,
              s.versions_forwarded);
  out.counter(p + "received_bytes_total", "Bytes received from upstream.", l, s.bytes_received);
  out.counter(p + "failovers_total", "Switches to another upstream.", l, s.failovers);
  out.counter(p + "versions_skipped_total", "Versions its ring could not take.", l, s.versions_skipped);
  out.gauge(p + "latest_version", "Newest version it serves.", l, s.latest_version);
  out.gauge(p + "upstream_latest_version", "Newest version the upstream announced.", l,
            s.upstream_latest_version);
  out.gauge(p + "lag_versions", "upstream_latest_version - latest_version.", l,
            s.upstream_latest_version > s.latest_version
                ? static_cast<double>(s.upstream_latest_version - s.latest_version)
                : 0.0);
  out.gauge(p + "forward_lag_seconds", "Announcement to commit here, for the version forwarded last.", l,
            s.forward_lag_seconds);
  out.gauge(p + "upstream_connected", "1 while an upstream is connected.", l, s.upstream_connected ? 1 : 0);
  out.gauge(p + "running", "1 until forwarding stops for good.", l, s.running ? 1 : 0);
  collect_publisher(out, source, s.publisher, s.latest_version);
}

void collect_staged(FamilySet& out, const std::string& source, const StagedUpdatesStats& s) {
  const MetricLabels l = with_source(source);
  const std::string p = "weightsync_staged_";
  out.counter(p + "versions_staged_total", "Versions pulled in the background.", l, s.staged);
  out.counter(p + "installs_total", "Versions made live.", l, s.installs);
  out.counter(p + "failed_pulls_total", "Background pulls that failed (live weights untouched).", l,
              s.failed_pulls);
  out.counter(p + "not_ready_total", "install() calls with nothing staged.", l, s.not_ready);
  out.gauge(p + "blocked_max_seconds", "Longest install pause.", l, s.blocked.max_seconds);
  collect_generation_blocked(out, source, s.blocked.total_seconds, s.blocked.count);
}

void collect_generation_blocked(FamilySet& out, const std::string& source, double seconds,
                                std::uint64_t count) {
  const MetricLabels l = with_source(source);
  out.counter("weightsync_generation_blocked_seconds_total", "Time generation was blocked on new weights.", l,
              seconds);
  out.counter("weightsync_generation_blocks_total", "Times generation was blocked on new weights.", l, count);
}

}  // namespace weightsync::detail
