// metric_families.h: turns the library's stats structs into Prometheus
// metric families (prometheus-cpp's MetricFamily), one scrape at a time.
//
// Contract: FamilySet gathers samples by metric name, so several sources of
// one kind (a publisher and a relay's publisher) land in one family with
// different `source` labels. Not thread-safe: one FamilySet per scrape.
// Only numbers and the label values given go in: never strings from stats
// (error texts, addresses). Throws only std::bad_alloc.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "weightsync/publisher.h"
#include "weightsync/relay.h"
#include "weightsync/staged_updates.h"
#include "weightsync/subscriber.h"

namespace weightsync::detail {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class FamilySet {
 public:
  void counter(const std::string& name, const std::string& help, const MetricLabels& labels, double value);
  void gauge(const std::string& name, const std::string& help, const MetricLabels& labels, double value);
  // Buckets as SubscriberStats counts them (not cumulative; the last is +Inf).
  void histogram(const std::string& name, const std::string& help, const MetricLabels& labels,
                 const SubscriberStats& stats);
  std::vector<prometheus::MetricFamily> take();

 private:
  prometheus::ClientMetric& add(const std::string& name, const std::string& help, prometheus::MetricType type,
                                const MetricLabels& labels);
  std::map<std::string, prometheus::MetricFamily> families_;
};

void collect_publisher(FamilySet& out, const std::string& source, const PublisherStats& stats,
                       std::uint64_t latest_version);
// `labels`: {source} or {source, rank}; the histogram adds {transport}.
void collect_subscriber(FamilySet& out, const MetricLabels& labels, const std::string& transport,
                        const SubscriberStats& stats);
void collect_relay(FamilySet& out, const std::string& source, const RelayStats& stats);
void collect_staged(FamilySet& out, const std::string& source, const StagedUpdatesStats& stats);
void collect_generation_blocked(FamilySet& out, const std::string& source, double seconds,
                                std::uint64_t count);

}  // namespace weightsync::detail
