// ws-example-publisher: publishes a few versions of synthetic weights and keeps
// serving them until a subscriber has pulled the last one (or a deadline).
#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "metrics_flag.h"
#include "synthetic_weights.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Publish synthetic weights with libweightsync (the trainer's side of the demo)."};
  double size_mib = 256;
  int tensors = 64;
  int versions = 5;
  int interval_ms = 200;
  int linger_s = 60;
  std::uint16_t port = 0;
  std::string bind = "127.0.0.1";
  std::string address_file;
  app.add_option("--size-mib", size_mib, "Model size in MiB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--tensors", tensors, "Number of tensors")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--versions", versions, "Versions to publish")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--interval-ms", interval_ms, "Pause between versions")->capture_default_str();
  app.add_option("--linger-s", linger_s, "Keep serving this long after the last version")
      ->capture_default_str();
  app.add_option("--port", port, "TCP port (0: any free port)")->capture_default_str();
  app.add_option("--bind", bind, "Bind address (non-loopback needs WEIGHTSYNC_SECRET)")
      ->capture_default_str();
  app.add_option("--address-file", address_file, "Write host:port here once listening");
  std::string metrics_address;
  app.add_option("--metrics-address", metrics_address,
                 weightsync::tools::kMetricsAddressHelp);
  CLI11_PARSE(app, argc, argv);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  auto layout = example::make_layout(static_cast<std::uint64_t>(size_mib * 1024 * 1024), tensors);
  if (!layout.ok()) {
    std::fprintf(stderr, "publisher: %s\n", layout.status().to_string().c_str());
    return 2;
  }
  weightsync::PublisherOptions options;
  options.port = port;
  options.bind_address = bind;
  auto publisher = weightsync::Publisher::create(*layout, options);
  if (!publisher.ok()) {
    std::fprintf(stderr, "publisher: %s\n", publisher.status().to_string().c_str());
    return 2;
  }
  auto metrics = weightsync::tools::start_metrics_flag(metrics_address, "publisher");
  if (!metrics.ok()) {
    std::fprintf(stderr, "publisher: %s\n", metrics.status().to_string().c_str());
    return 2;
  }
  if (*metrics) (*metrics)->add_publisher(**publisher, "trainer");
  const std::string address = (*publisher)->address();
  std::printf("publisher: listening on %s (%zu slots x %llu bytes, %zu tensors)\n", address.c_str(),
              (*publisher)->slot_count(), static_cast<unsigned long long>(layout->total_bytes()),
              layout->tensors().size());
  std::fflush(stdout);
  if (!address_file.empty()) {
    std::string tmp = address_file + ".tmp";
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(f, "%s\n", address.c_str());
      std::fclose(f);
      std::rename(tmp.c_str(), address_file.c_str());
    }
  }

  for (int v = 1; v <= versions && !g_stop; ++v) {
    // In-place publish: write each tensor straight into the slot.
    auto writer = (*publisher)->begin_publish(static_cast<std::uint64_t>(v));
    if (!writer.ok()) {
      std::fprintf(stderr, "publisher: version %d: %s\n", v, writer.status().to_string().c_str());
      return 1;
    }
    for (const auto& t : layout->tensors()) {
      example::fill(static_cast<char*>(writer->data()) + t.offset, t.bytes, v, t.offset / 4);
    }
    auto committed = writer->commit();
    if (!committed.ok()) {
      std::fprintf(stderr, "publisher: version %d: %s\n", v, committed.status().to_string().c_str());
      return 1;
    }
    std::printf("publisher: committed version %d in slot %u\n", v, committed->slot);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(linger_s);
  while (!g_stop && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto stats = (*publisher)->stats();
  std::printf("publisher: done: %llu versions, %llu leases granted, %llu revoked, %llu bytes served\n",
              static_cast<unsigned long long>(stats.versions_published),
              static_cast<unsigned long long>(stats.leases_granted),
              static_cast<unsigned long long>(stats.leases_revoked),
              static_cast<unsigned long long>(stats.bytes_served));
  return 0;
}
