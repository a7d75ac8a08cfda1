// ws-example-subscriber: pulls every new version from a publisher straight
// into per-tensor buffers (scatter) or one region, checks every byte, and
// prints a summary line with versions, bytes and GB/s.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "metrics_flag.h"
#include "synthetic_weights.h"

int main(int argc, char** argv) {
  CLI::App app{"Pull weights from a libweightsync publisher (the generator's side of the demo)."};
  std::string address;
  int versions = 5;
  int timeout_s = 30;
  bool contiguous = false;
  app.add_option("address", address, "Publisher host:port")->required();
  app.add_option("--versions", versions, "Stop after pulling this version")->capture_default_str();
  app.add_option("--timeout-s", timeout_s, "Give up waiting for a new version after this long")
      ->capture_default_str();
  app.add_flag("--contiguous", contiguous, "Pull into one region instead of one buffer per tensor");
  std::string metrics_address;
  app.add_option("--metrics-address", metrics_address,
                 weightsync::tools::kMetricsAddressHelp);
  CLI11_PARSE(app, argc, argv);

  weightsync::SubscriberOptions options;
  options.client_name = "example-subscriber";
  auto sub = weightsync::Subscriber::connect(address, options);
  if (!sub.ok()) {
    std::fprintf(stderr, "subscriber: %s\n", sub.status().to_string().c_str());
    return 2;
  }
  auto metrics = weightsync::tools::start_metrics_flag(metrics_address, "subscriber");
  if (!metrics.ok()) {
    std::fprintf(stderr, "subscriber: %s\n", metrics.status().to_string().c_str());
    return 2;
  }
  if (*metrics) (*metrics)->add_subscriber(**sub, "generator");
  const weightsync::WeightLayout& layout = (*sub)->layout();
  std::printf("subscriber: connected over %s; layout has %zu tensors, %llu bytes\n",
              (*sub)->transport().c_str(), layout.tensors().size(),
              static_cast<unsigned long long>(layout.total_bytes()));

  // Destination memory, allocated once and reused for every version.
  std::vector<weightsync::HostBuffer> buffers;
  std::vector<weightsync::ScatterEntry> entries;
  weightsync::HostBuffer region;
  if (contiguous) {
    auto r = weightsync::HostBuffer::allocate(layout.total_bytes());
    if (!r.ok()) return std::fprintf(stderr, "subscriber: %s\n", r.status().to_string().c_str()), 2;
    region = std::move(*r);
  } else {
    for (const auto& t : layout.tensors()) {
      auto b = weightsync::HostBuffer::allocate(t.bytes);
      if (!b.ok()) return std::fprintf(stderr, "subscriber: %s\n", b.status().to_string().c_str()), 2;
      entries.push_back({t.spec.name, b->data(), t.bytes});
      buffers.push_back(std::move(*b));
    }
  }
  const auto destination = contiguous ? weightsync::Destination::contiguous(region.data(), region.size())
                                      : weightsync::Destination::scatter(entries);

  std::vector<double> seconds;
  std::uint64_t bytes = 0, first = 0, last = 0;
  unsigned retries = 0;
  while (last < static_cast<std::uint64_t>(versions)) {
    weightsync::PullOptions pull_options;
    pull_options.wait = std::chrono::seconds(timeout_s);
    auto pulled = (*sub)->pull(destination, pull_options);
    if (!pulled.ok()) {
      std::fprintf(stderr, "subscriber: pull failed: %s (what to do: %s)\n",
                   pulled.status().to_string().c_str(), weightsync::to_string(pulled.status().action()));
      return 1;
    }
    // Check every byte against the pattern of the version we were told we got.
    for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
      const auto& t = layout.tensors()[i];
      const void* data = contiguous ? static_cast<const char*>(region.data()) + t.offset : buffers[i].data();
      std::int64_t bad = example::first_mismatch(data, t.bytes, pulled->version, t.offset / 4);
      if (bad >= 0) {
        std::fprintf(stderr, "subscriber: version %llu tensor %s word %lld is wrong\n",
                     static_cast<unsigned long long>(pulled->version), t.spec.name.c_str(),
                     static_cast<long long>(bad));
        return 1;
      }
    }
    if (first == 0) first = pulled->version;
    last = pulled->version;
    bytes += pulled->bytes;
    retries += pulled->retries;
    seconds.push_back(pulled->seconds);
    std::printf("subscriber: pulled version %llu (%llu bytes in %.3f s, %.2f GB/s), verified\n",
                static_cast<unsigned long long>(pulled->version),
                static_cast<unsigned long long>(pulled->bytes), pulled->seconds,
                pulled->bytes / pulled->seconds / 1e9);
    std::fflush(stdout);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double per_pull = static_cast<double>(bytes) / seconds.size();
  std::printf(
      "SUMMARY transport=%s versions=%zu (v%llu..v%llu) bytes=%llu median_pull_s=%.4f median_gbps=%.2f "
      "retries=%u verified=all\n",
      (*sub)->transport().c_str(), seconds.size(), static_cast<unsigned long long>(first),
      static_cast<unsigned long long>(last), static_cast<unsigned long long>(bytes), median,
      per_pull / median / 1e9, retries);
  return 0;
}
