// The metrics exposition without a server: the endpoint address parser, the
// names, types and values the stats structs turn into, the histogram's
// buckets, and Prometheus's naming rules over every family.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <regex>
#include <sstream>

#include <prometheus/text_serializer.h>

#include "metrics/endpoint_address.h"
#include "metrics/metric_families.h"
#include "subscriber/pull_histogram.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {

std::string text_of(FamilySet& set) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, set.take());
  return out.str();
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("metrics address: loopback unless a host is given, numeric hosts only, ports checked",
          "[metrics]") {
  auto a = parse_metrics_address("9464");
  REQUIRE(a.ok());
  CHECK(a->listening_ports() == "127.0.0.1:9464");
  CHECK(parse_metrics_address(":0")->listening_ports() == "127.0.0.1:0");
  CHECK(parse_metrics_address("localhost:5")->listening_ports() == "127.0.0.1:5");
  CHECK(parse_metrics_address("0.0.0.0:80")->listening_ports() == "0.0.0.0:80");
  CHECK(parse_metrics_address("[::1]:7")->listening_ports() == "[::1]:7");
  for (const char* bad : {"", ":", "host.example:80", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:-1", "a:b:c",
                          " 9464", "1.2.3.4:99999999999999999999", "[::g]:1", "1.2.3.4:80 "}) {
    INFO(bad);
    auto r = parse_metrics_address(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  }
}

TEST_CASE("metrics: pull latencies land in the right bucket, NaN and negatives in the first", "[metrics]") {
  SubscriberStats s;
  count_pull_seconds(s, 0.001);   // on the first bound: first bucket (le is inclusive)
  count_pull_seconds(s, 0.0011);  // just above: second
  count_pull_seconds(s, 0.3);     // (0.25, 0.5]
  count_pull_seconds(s, 1000.0);  // above every bound: the last
  count_pull_seconds(s, std::nan(""));
  count_pull_seconds(s, -1.0);
  CHECK(s.pull_seconds_counts[0] == 3);
  CHECK(s.pull_seconds_counts[1] == 1);
  CHECK(s.pull_seconds_counts[8] == 1);
  CHECK(s.pull_seconds_counts[kPullSecondsBuckets - 1] == 1);
  CHECK(s.pull_seconds_sum == Approx(0.001 + 0.0011 + 0.3 + 1000.0));
}

TEST_CASE("metrics: publisher, subscriber, relay and staged stats expose their values under their names",
          "[metrics]") {
  PublisherStats p;
  p.versions_published = 7;
  p.bytes_served = 1234;
  p.auth_failures = 2;
  p.leases_active = 3;
  p.connections_active = 4;
  p.slowest_reader_version = 6;
  p.slowest_reader_seconds = 0.5;
  SubscriberStats s;
  s.pulls = 5;
  s.bytes = 4096;
  s.retries = 1;
  s.delta_pulls = 3;
  s.delta_fallbacks = 1;
  s.held_version = 6;
  count_pull_seconds(s, 0.001953125);  // binary fractions: the sum prints exactly
  count_pull_seconds(s, 0.015625);
  count_pull_seconds(s, 99.0);
  RelayStats r;
  r.versions_forwarded = 2;
  r.latest_version = 4;
  r.upstream_latest_version = 6;
  StagedUpdatesStats st;
  st.installs = 9;
  st.blocked.total_seconds = 0.25;
  st.blocked.count = 9;

  FamilySet set;
  collect_publisher(set, "trainer", p, 7);
  collect_subscriber(set, {{"source", "gen0"}}, "tcp", s);
  collect_relay(set, "relay", r);
  collect_staged(set, "staged", st);
  const std::string text = text_of(set);
  INFO(text);
  CHECK(has_line(text, "# TYPE weightsync_publisher_versions_published_total counter"));
  CHECK(has_line(text, "weightsync_publisher_versions_published_total{source=\"trainer\"} 7"));
  CHECK(has_line(text, "weightsync_publisher_latest_version{source=\"trainer\"} 7"));
  CHECK(has_line(text, "weightsync_publisher_served_bytes_total{source=\"trainer\"} 1234"));
  CHECK(has_line(text, "weightsync_publisher_auth_failures_total{source=\"trainer\"} 2"));
  CHECK(has_line(text, "# TYPE weightsync_publisher_leases_active gauge"));
  CHECK(has_line(text, "weightsync_publisher_leases_active{source=\"trainer\"} 3"));
  CHECK(has_line(text, "weightsync_publisher_connections_active{source=\"trainer\"} 4"));
  CHECK(has_line(text, "weightsync_publisher_slowest_reader_version{source=\"trainer\"} 6"));
  CHECK(has_line(text, "weightsync_publisher_slowest_reader_seconds{source=\"trainer\"} 0.5"));
  CHECK(has_line(text, "weightsync_subscriber_pulls_total{source=\"gen0\"} 5"));
  CHECK(has_line(text, "weightsync_subscriber_pulled_bytes_total{source=\"gen0\"} 4096"));
  CHECK(has_line(text, "weightsync_subscriber_pull_retries_total{source=\"gen0\"} 1"));
  CHECK(has_line(text, "weightsync_subscriber_held_version{source=\"gen0\"} 6"));
  CHECK(has_line(text, "weightsync_subscriber_delta_hit_ratio{source=\"gen0\"} 0.75"));
  // The histogram: cumulative buckets, +Inf = _count, the sum.
  CHECK(has_line(text, "# TYPE weightsync_subscriber_pull_duration_seconds histogram"));
  CHECK(has_line(text,
                 "weightsync_subscriber_pull_duration_seconds_bucket{source=\"gen0\",transport=\"tcp\",le="
                 "\"0.001\"} 0"));
  CHECK(has_line(text,
                 "weightsync_subscriber_pull_duration_seconds_bucket{source=\"gen0\",transport=\"tcp\",le="
                 "\"0.0025\"} 1"));
  CHECK(has_line(text,
                 "weightsync_subscriber_pull_duration_seconds_bucket{source=\"gen0\",transport=\"tcp\",le="
                 "\"0.025\"} 2"));
  CHECK(has_line(
      text,
      "weightsync_subscriber_pull_duration_seconds_bucket{source=\"gen0\",transport=\"tcp\",le=\"60\"} 2"));
  CHECK(has_line(
      text,
      "weightsync_subscriber_pull_duration_seconds_bucket{source=\"gen0\",transport=\"tcp\",le=\"+Inf\"} 3"));
  CHECK(has_line(text,
                 "weightsync_subscriber_pull_duration_seconds_count{source=\"gen0\",transport=\"tcp\"} 3"));
  CHECK(has_line(
      text,
      "weightsync_subscriber_pull_duration_seconds_sum{source=\"gen0\",transport=\"tcp\"} 99.017578125"));
  // Relay lag, and the relay's own publisher under its source.
  CHECK(has_line(text, "weightsync_relay_versions_forwarded_total{source=\"relay\"} 2"));
  CHECK(has_line(text, "weightsync_relay_lag_versions{source=\"relay\"} 2"));
  CHECK(has_line(text, "weightsync_publisher_latest_version{source=\"relay\"} 4"));
  // Generation-blocked time from StagedUpdates' installs.
  CHECK(has_line(text, "weightsync_staged_installs_total{source=\"staged\"} 9"));
  CHECK(has_line(text, "weightsync_generation_blocked_seconds_total{source=\"staged\"} 0.25"));
  CHECK(has_line(text, "weightsync_generation_blocks_total{source=\"staged\"} 9"));
  // One family per name: two publishers share the TYPE line.
  FamilySet two;
  collect_publisher(two, "a", p, 1);
  collect_publisher(two, "b", p, 2);
  const std::string both = text_of(two);
  std::size_t types = 0;
  for (std::size_t at = both.find("# TYPE weightsync_publisher_latest_version "); at != std::string::npos;
       at = both.find("# TYPE weightsync_publisher_latest_version ", at + 1)) {
    ++types;
  }
  CHECK(types == 1);
  CHECK(has_line(both, "weightsync_publisher_latest_version{source=\"b\"} 2"));
}

TEST_CASE("metrics: every family follows Prometheus's naming rules", "[metrics]") {
  FamilySet set;
  collect_publisher(set, "p", PublisherStats{}, 0);
  collect_subscriber(set, {{"source", "s"}}, "shm", SubscriberStats{});
  collect_relay(set, "r", RelayStats{});
  collect_staged(set, "st", StagedUpdatesStats{});
  const auto families = set.take();
  CHECK(families.size() > 40);
  const std::regex name_rule("weightsync_[a-z][a-z0-9_]*[a-z]");
  for (const auto& f : families) {
    INFO(f.name);
    CHECK(std::regex_match(f.name, name_rule));
    CHECK_FALSE(f.help.empty());
    const bool total = f.name.size() > 6 && f.name.compare(f.name.size() - 6, 6, "_total") == 0;
    CHECK(total == (f.type == prometheus::MetricType::Counter));  // _total on counters, only on them
    const std::string base = total ? f.name.substr(0, f.name.size() - 6) : f.name;
    // A unit in the name comes last, in base units, plural.
    for (const char* unit : {"seconds", "bytes"}) {
      const std::string u = unit;
      if (base.find(u) != std::string::npos) CHECK(base.compare(base.size() - u.size(), u.size(), u) == 0);
    }
    for (const char* not_base : {"_ms", "_millis", "_us", "_kib", "_mib", "_gib", "_kb", "_mb", "_percent"}) {
      CHECK(f.name.find(not_base) == std::string::npos);
    }
  }
}
