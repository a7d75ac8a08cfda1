// The /metrics endpoint served over real HTTP by a real publisher,
// subscriber and relay in this process: the values after known events, what
// a hostile scraper can see (no secret, no address) and do (idle connections
// hold no pull back, and are dropped within the request timeout).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "http_get.h"
#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {

constexpr auto kHttpTimeout = std::chrono::seconds(5);

std::string scrape_http(const MetricsEndpoint& endpoint) {
  const HttpReply reply = http_get("127.0.0.1", port_of(endpoint.address()), "/metrics", kHttpTimeout);
  INFO(reply.error);
  REQUIRE(reply.ok);
  REQUIRE(reply.status == 200);
  return reply.body;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

std::unique_ptr<MetricsEndpoint> start_endpoint(MetricsOptions options = {}) {
  if (options.address.empty()) options.address = ":0";
  auto endpoint = MetricsEndpoint::start(options);
  INFO(endpoint.status().to_string());
  REQUIRE(endpoint.ok());
  return std::move(*endpoint);
}

std::string endpoint_port_address(const MetricsEndpoint& endpoint) {
  return ":" + std::to_string(port_of(endpoint.address()));
}

int thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

}  // namespace

TEST_CASE("metrics: a scrape over HTTP counts versions, bytes, pulls and their latency after known events",
          "[metrics]") {
  REQUIRE(metrics_available());
  const auto layout = bytes_layout(1 << 20, 3);
  auto publisher = Publisher::create(layout);
  REQUIRE(publisher.ok());
  auto endpoint = start_endpoint();
  CHECK(endpoint->address().rfind("127.0.0.1:", 0) == 0);  // ":0": loopback, a free port
  CHECK(port_of(endpoint->address()) != 0);
  endpoint->add_publisher(**publisher, "trainer");
  auto sub = Subscriber::connect((*publisher)->address(), quick_options());
  REQUIRE(sub.ok());
  const MetricsSourceId sub_id = endpoint->add_subscriber(**sub, "gen0");
  CHECK(sub_id != 0);

  auto region = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(region.ok());
  for (std::uint64_t v = 1; v <= 3; ++v) {
    publish_pattern(**publisher, v);
    auto pulled = (*sub)->pull(Destination::contiguous(region->data(), region->size()));
    REQUIRE(pulled.ok());
  }
  // The publisher counts a pull when its lease comes back, which may be just
  // after pull() returned: wait (bounded) until it has seen all three, so
  // nothing changes between the HTTP scrape and scrape() below.
  const auto settle = std::chrono::steady_clock::now();
  while (((*publisher)->stats().slowest_reader_version < 3 ||
          (*publisher)->stats().bytes_served < 3 * layout.payload_bytes()) &&
         seconds_since(settle) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string text = scrape_http(*endpoint);
  INFO(text);
  const std::string bytes = std::to_string(3 * layout.payload_bytes());
  CHECK(has_line(text, "weightsync_publisher_versions_published_total{source=\"trainer\"} 3"));
  CHECK(has_line(text, "weightsync_publisher_latest_version{source=\"trainer\"} 3"));
  CHECK(has_line(text, "weightsync_publisher_served_bytes_total{source=\"trainer\"} " + bytes));
  CHECK(has_line(text, "weightsync_publisher_connections_accepted_total{source=\"trainer\"} " +
                           std::to_string((*publisher)->stats().connections_accepted)));
  CHECK(has_line(text, "weightsync_publisher_leases_granted_total{source=\"trainer\"} 3"));
  CHECK(has_line(text, "weightsync_publisher_slowest_reader_version{source=\"trainer\"} 3"));
  CHECK(text.find("weightsync_publisher_slowest_reader_seconds{source=\"trainer\"} 0\n") ==
        std::string::npos);
  CHECK(has_line(text, "weightsync_subscriber_pulls_total{source=\"gen0\"} 3"));
  CHECK(has_line(text, "weightsync_subscriber_pulled_bytes_total{source=\"gen0\"} " + bytes));
  CHECK(has_line(text, "weightsync_subscriber_held_version{source=\"gen0\"} 3"));
  CHECK(has_line(text,
                 "weightsync_subscriber_pull_duration_seconds_count{source=\"gen0\",transport=\"tcp\"} 3"));
  CHECK(has_line(
      text,
      "weightsync_subscriber_pull_duration_seconds_bucket{source=\"gen0\",transport=\"tcp\",le=\"+Inf\"} 3"));
  CHECK(text == endpoint->scrape());  // the HTTP body is scrape()'s text

  // Only /metrics is served; a removed source is gone from the next scrape.
  CHECK(http_get("127.0.0.1", port_of(endpoint->address()), "/", kHttpTimeout).status == 404);
  CHECK(http_get("127.0.0.1", port_of(endpoint->address()), "/../../etc/passwd", kHttpTimeout).status != 200);
  endpoint->remove(sub_id);
  CHECK(scrape_http(*endpoint).find("weightsync_subscriber_pulls_total") == std::string::npos);
}

TEST_CASE("metrics: bad addresses and a port in use are refused with what to do", "[metrics]") {
  auto first = start_endpoint();
  MetricsOptions again;
  again.address = endpoint_port_address(*first);
  auto second = MetricsEndpoint::start(again);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == ErrorCode::kInvalidConfig);
  CHECK(second.status().message().find("in use") != std::string::npos);
  MetricsOptions named;
  named.address = "metrics.example:9464";
  CHECK(MetricsEndpoint::start(named).status().code() == ErrorCode::kInvalidArgument);
  MetricsOptions no_threads;
  no_threads.address = ":0";
  no_threads.threads = 0;
  CHECK(MetricsEndpoint::start(no_threads).status().code() == ErrorCode::kInvalidArgument);
  // No address: no server, scrape() only.
  auto quiet = MetricsEndpoint::start({});
  REQUIRE(quiet.ok());
  CHECK((*quiet)->address().empty());
  CHECK((*quiet)->scrape().empty());
}

TEST_CASE("metrics: the secret, addresses and error texts never appear in a scrape, auth failures do",
          "[metrics]") {
  const std::string secret = "s3cret-metrics-7f2a9c";
  const auto layout = bytes_layout(64 << 10);
  PublisherOptions popts;
  popts.secret = secret;
  auto publisher = Publisher::create(layout, popts);
  REQUIRE(publisher.ok());
  auto endpoint = start_endpoint();
  endpoint->add_publisher(**publisher, "trainer");
  SubscriberOptions wrong = quick_options();
  wrong.secret = "not-the-secret";
  CHECK_FALSE(Subscriber::connect((*publisher)->address(), wrong).ok());
  SubscriberOptions right = quick_options();
  right.secret = secret;
  auto sub = Subscriber::connect((*publisher)->address(), right);
  REQUIRE(sub.ok());
  endpoint->add_subscriber(**sub, "gen0");
  publish_pattern(**publisher, 1);
  auto region = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(region.ok());
  REQUIRE((*sub)->pull(Destination::contiguous(region->data(), region->size())).ok());
  endpoint->count_generation_blocked(0.125, "gen0");

  const std::string text = scrape_http(*endpoint);
  INFO(text);
  CHECK(has_line(text, "weightsync_publisher_auth_failures_total{source=\"trainer\"} 1"));
  CHECK(has_line(text, "weightsync_generation_blocked_seconds_total{source=\"gen0\"} 0.125"));
  CHECK(text.find(secret) == std::string::npos);
  CHECK(text.find("not-the-secret") == std::string::npos);
  CHECK(text.find(std::to_string((*publisher)->port())) == std::string::npos);  // no peer address
  CHECK(text.find("127.0.0.1") == std::string::npos);
  CHECK(text.find("0x") == std::string::npos);  // no pointers
  // Every sample is a name, labels from a known set and a number: no free text.
  const std::regex sample(
      R"re([a-z_]+(\{((source="(trainer|gen0)"|transport="tcp"|le="[0-9.e+Inf-]+"|quantile="[0-9.]+"),?)*\})? )re"
      R"re([-+0-9.eEInfNa]+)re");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    INFO(line);
    CHECK(std::regex_match(line, sample));
  }
}

TEST_CASE("metrics: idle connections to the endpoint hold back no pull and are dropped in time",
          "[metrics]") {
  const auto layout = bytes_layout(1 << 20);
  auto publisher = Publisher::create(layout);
  REQUIRE(publisher.ok());
  MetricsOptions options;
  options.threads = 2;
  options.queue = 4;
  options.request_timeout = std::chrono::milliseconds(500);
  auto endpoint = start_endpoint(options);
  endpoint->add_publisher(**publisher, "trainer");
  auto sub = Subscriber::connect((*publisher)->address(), quick_options(2000));
  REQUIRE(sub.ok());
  auto region = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(region.ok());
  const auto pull_once = [&](std::uint64_t v) {
    publish_pattern(**publisher, v);
    const auto start = std::chrono::steady_clock::now();
    auto pulled = (*sub)->pull(Destination::contiguous(region->data(), region->size()));
    REQUIRE(pulled.ok());
    CHECK(seconds_since(start) < 1.0);
  };
  pull_once(1);  // the publisher's serving threads exist now
  const int threads_before = thread_count();

  // 64 scrapers that connect and say nothing (civetweb's queue and the
  // listen backlog take them).
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    const int fd = open_idle_connection("127.0.0.1", port_of(endpoint->address()), std::chrono::seconds(1));
    if (fd >= 0) idle.push_back(fd);
  }
  CHECK(idle.size() >= 8);
  // The publisher serves every pull as before, quickly, and no thread was
  // started for them (one each would add up to 64; the publisher's worker
  // pool may grow by a thread or two on its own when pulls overlap, as they
  // do under the sanitizers' slower runs).
  for (std::uint64_t v = 2; v <= 5; ++v) pull_once(v);
  CHECK(thread_count() <= threads_before + 3);
  for (int fd : idle) ::close(fd);
  // Once they hang up, the endpoint serves again (bounded wait).
  auto start = std::chrono::steady_clock::now();
  HttpReply reply;
  while (seconds_since(start) < 10.0 && !(reply.ok && reply.status == 200)) {
    reply = http_get("127.0.0.1", port_of(endpoint->address()), "/metrics", std::chrono::seconds(2));
  }
  INFO(reply.error);
  REQUIRE(reply.status == 200);
  CHECK(has_line(reply.body, "weightsync_publisher_versions_published_total{source=\"trainer\"} 5"));
  // Silent connections that stay open hold a server thread for at most the
  // request timeout: with every thread held by one, a scrape still gets
  // through within about that timeout.
  std::vector<int> holders;
  for (std::size_t i = 0; i < options.threads; ++i) {
    holders.push_back(
        open_idle_connection("127.0.0.1", port_of(endpoint->address()), std::chrono::seconds(1)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  start = std::chrono::steady_clock::now();
  reply = http_get("127.0.0.1", port_of(endpoint->address()), "/metrics", std::chrono::seconds(5));
  const double waited = seconds_since(start);
  for (int fd : holders) {
    if (fd >= 0) ::close(fd);
  }
  INFO(reply.error);
  CHECK(reply.status == 200);
  CHECK(waited < 0.5 * 2 + 1.0);  // request_timeout (0.5 s), with margin; civetweb's default would be 30 s
}

TEST_CASE("metrics: a relay's forwarding and lag, its downstream publisher, a staged subscriber",
          "[metrics]") {
  const auto layout = bytes_layout(256 << 10);
  PublisherOptions checksummed;
  checksummed.checksum = true;  // StagedUpdates stages only checksummed versions by default
  auto upstream = Publisher::create(layout, checksummed);
  REQUIRE(upstream.ok());
  RelayOptions ropts;
  ropts.upstreams = {(*upstream)->address()};
  ropts.subscriber = quick_options();
  auto relay = Relay::create(ropts);
  REQUIRE(relay.ok());
  auto endpoint = start_endpoint();
  endpoint->add_relay(**relay, "relay");
  auto downstream = Subscriber::connect((*relay)->address(), quick_options());
  REQUIRE(downstream.ok());
  auto staged = StagedUpdates::create(std::move(*downstream));
  INFO(staged.status().to_string());
  REQUIRE(staged.ok());
  endpoint->add_staged_updates(**staged, "engine");
  publish_pattern(**upstream, 1);
  publish_pattern(**upstream, 2);
  REQUIRE((*relay)->wait_for_version(1, std::chrono::seconds(10)).ok());
  // Install what the background pull stages (bounded wait).
  const auto start = std::chrono::steady_clock::now();
  while ((*staged)->live_version() < 2 && seconds_since(start) < 10.0) {
    (void)(*staged)->install();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE((*staged)->live_version() == 2);
  const std::string text = scrape_http(*endpoint);
  INFO(text);
  CHECK(has_line(text, "weightsync_relay_latest_version{source=\"relay\"} 2"));
  CHECK(has_line(text, "weightsync_relay_upstream_latest_version{source=\"relay\"} 2"));
  CHECK(has_line(text, "weightsync_relay_lag_versions{source=\"relay\"} 0"));
  CHECK(has_line(text, "weightsync_relay_upstream_connected{source=\"relay\"} 1"));
  CHECK(has_line(text, "weightsync_publisher_latest_version{source=\"relay\"} 2"));
  CHECK(text.find("weightsync_staged_installs_total{source=\"engine\"} ") != std::string::npos);
  CHECK(text.find("weightsync_generation_blocks_total{source=\"engine\"} ") != std::string::npos);
  CHECK(text.find("weightsync_subscriber_pull_duration_seconds_count{source=\"engine\",transport=\"") !=
        std::string::npos);
}
