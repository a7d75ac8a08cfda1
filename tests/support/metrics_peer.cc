// ws_metrics_peer: a publisher or a subscriber process with a /metrics
// endpoint, for the test a real Prometheus scrapes
// (tests/integration/prometheus_scrape.sh).
//
//   ws_metrics_peer publish --metrics ADDR [--size B] [--period-ms P] [--seconds S]
//     Prints "ADDRESS host:port" and "METRICS host:port", then publishes a new
//     version every P ms (default 100) until S seconds (default 30) pass or
//     stdin closes.
//   ws_metrics_peer subscribe --address A --metrics ADDR [--transport T] [--seconds S]
//     Prints "METRICS host:port", then pulls each new version (waiting up to
//     1 s each) until S seconds pass or stdin closes; "PULLED v" per pull.
// Exit status 0, or 1 with "ERROR ..." on stdout.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "patterns.h"
#include "weightsync/weightsync.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string arg(const std::vector<std::string>& args, const std::string& name, const std::string& fallback) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == name) return args[i + 1];
  }
  return fallback;
}

bool stdin_closed() {
  pollfd p{0, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return ::read(0, &c, 1) <= 0;
}

int fail(const weightsync::Status& s) {
  std::printf("ERROR %s\n", s.to_string().c_str());
  std::fflush(stdout);
  return 1;
}

std::unique_ptr<weightsync::MetricsEndpoint> endpoint_or_exit(const std::vector<std::string>& args) {
  weightsync::MetricsOptions options;
  options.address = arg(args, "--metrics", ":0");
  auto endpoint = weightsync::MetricsEndpoint::start(options);
  if (!endpoint.ok()) std::exit(fail(endpoint.status()));
  std::printf("METRICS %s\n", (*endpoint)->address().c_str());
  std::fflush(stdout);
  return std::move(*endpoint);
}

int run_publisher(const std::vector<std::string>& args) {
  const std::uint64_t size = std::strtoull(arg(args, "--size", "1048576").c_str(), nullptr, 10);
  const auto period = std::chrono::milliseconds(std::atoi(arg(args, "--period-ms", "100").c_str()));
  const auto until = Clock::now() + std::chrono::seconds(std::atoi(arg(args, "--seconds", "30").c_str()));
  auto publisher = weightsync::Publisher::create(wstest::bytes_layout(size, 2));
  if (!publisher.ok()) return fail(publisher.status());
  auto endpoint = endpoint_or_exit(args);
  endpoint->add_publisher(**publisher, "trainer");
  std::printf("ADDRESS %s\n", (*publisher)->address().c_str());
  std::fflush(stdout);
  for (std::uint64_t v = 1; Clock::now() < until && !stdin_closed(); ++v) {
    auto writer = (*publisher)->begin_publish(v);
    if (!writer.ok()) return fail(writer.status());
    wstest::fill_pattern(writer->data(), writer->size(), v, 0);
    if (auto committed = writer->commit(); !committed.ok()) return fail(committed.status());
    std::this_thread::sleep_for(period);
  }
  return 0;
}

int run_subscriber(const std::vector<std::string>& args) {
  weightsync::SubscriberOptions options;
  options.transport = arg(args, "--transport", "tcp");
  options.connect_timeout_ms = 5000;
  options.io_timeout_ms = 5000;
  const auto until = Clock::now() + std::chrono::seconds(std::atoi(arg(args, "--seconds", "30").c_str()));
  auto sub = weightsync::Subscriber::connect(arg(args, "--address", ""), options);
  if (!sub.ok()) return fail(sub.status());
  auto endpoint = endpoint_or_exit(args);
  endpoint->add_subscriber(**sub, "generator");
  auto region = weightsync::HostBuffer::allocate((*sub)->layout().total_bytes());
  if (!region.ok()) return fail(region.status());
  const auto destination = weightsync::Destination::contiguous(region->data(), region->size());
  weightsync::PullOptions pull;
  pull.wait = std::chrono::seconds(1);
  while (Clock::now() < until && !stdin_closed()) {
    auto pulled = (*sub)->pull(destination, pull);
    if (pulled.ok()) {
      std::printf("PULLED %llu\n", static_cast<unsigned long long>(pulled->version));
      std::fflush(stdout);
    } else if (pulled.status().code() != weightsync::ErrorCode::kNotReady &&
               pulled.status().code() != weightsync::ErrorCode::kTimeout) {
      return fail(pulled.status());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: ws_metrics_peer publish|subscribe ... (see the file's comment)\n");
    return 2;
  }
  if (args[0] == "publish") return run_publisher(args);
  if (args[0] == "subscribe") return run_subscriber(args);
  std::fprintf(stderr, "ws_metrics_peer: unknown role %s\n", args[0].c_str());
  return 2;
}
