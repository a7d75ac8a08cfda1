// weightsync-metrics-cost: what the /metrics endpoint costs a pull
// (docs/perf/metrics.md). One publisher and one subscriber in this process,
// over a real transport (shm or tcp); pulls of V-byte versions timed in three
// modes, interleaved run by run (rotating which goes first):
//   off      no endpoint,
//   on       an endpoint serving /metrics on 127.0.0.1, nobody scraping,
//   scraped  the same with a scraper GETting /metrics every 100 ms,
//   off-again  no endpoint, a second time: the A/A control, whose ratio to
//            "off" shows how far the machine's noise alone moves a mode.
// Each run: P pulls, throughput = bytes / sum of PullResult::seconds.
// Then the two costs the endpoint adds, timed directly (robust to the load
// that drowns a 2% throughput difference on a shared VM): the CPU time of
// one scrape (what each GET costs, on a civetweb thread), and of one
// stats_snapshot() (the mutex and copy the Subscriber pays once per pull).
// Prints one line per run, each mode's median, and the median over runs of
// its ratio to "off" in the same run (paired: robust to load that drifts
// between runs, as on a shared 2-vCPU VM).
//
//   weightsync-metrics-cost [--transport shm|tcp] [--mib 64] [--pulls 20] [--runs 7]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "http_get.h"
#include "weightsync/weightsync.h"

namespace {

using namespace weightsync;

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return fallback;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

struct Rig {
  std::unique_ptr<Publisher> publisher;
  std::unique_ptr<Subscriber> subscriber;
  HostBuffer region;
  std::uint64_t version = 0;
};

// GB/s of `pulls` pulls (a new version committed before each).
double timed_pulls(Rig& rig, int pulls) {
  const auto dest = Destination::contiguous(rig.region.data(), rig.region.size());
  double seconds = 0.0;
  std::uint64_t bytes = 0;
  for (int i = 0; i < pulls; ++i) {
    auto writer = rig.publisher->begin_publish(++rig.version);
    if (!writer.ok() || !writer->commit().ok()) {
      std::fprintf(stderr, "publish failed\n");
      std::exit(1);
    }
    auto pulled = rig.subscriber->pull(dest);
    if (!pulled.ok()) {
      std::fprintf(stderr, "pull failed: %s\n", pulled.status().to_string().c_str());
      std::exit(1);
    }
    seconds += pulled->seconds;
    bytes += pulled->bytes;
  }
  return static_cast<double>(bytes) / seconds / 1e9;
}

double run_mode(Rig& rig, const std::string& mode, int pulls, std::uint64_t* scrapes) {
  if (mode == "off" || mode == "off-again") return timed_pulls(rig, pulls);
  MetricsOptions options;
  options.address = "127.0.0.1:0";
  auto endpoint = MetricsEndpoint::start(options);
  if (!endpoint.ok()) {
    std::fprintf(stderr, "%s\n", endpoint.status().to_string().c_str());
    std::exit(1);
  }
  (*endpoint)->add_publisher(*rig.publisher, "trainer");
  (*endpoint)->add_subscriber(*rig.subscriber, "generator");
  std::atomic<bool> stop{false};
  std::thread scraper;
  if (mode == "scraped") {
    const std::uint16_t port = wstest::port_of((*endpoint)->address());
    scraper = std::thread([&] {
      while (!stop.load()) {
        auto reply = wstest::http_get("127.0.0.1", port, "/metrics", std::chrono::seconds(2));
        if (reply.ok && reply.status == 200) ++*scrapes;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  const double gbps = timed_pulls(rig, pulls);
  stop = true;
  if (scraper.joinable()) scraper.join();
  return gbps;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string transport = arg(argc, argv, "--transport", "shm");
  const std::uint64_t bytes = std::strtoull(arg(argc, argv, "--mib", "64").c_str(), nullptr, 10) << 20;
  const int pulls = std::atoi(arg(argc, argv, "--pulls", "20").c_str());
  const int runs = std::atoi(arg(argc, argv, "--runs", "7").c_str());
  auto layout = WeightLayout::build({{"w", DType::kUInt8, {static_cast<std::int64_t>(bytes)}}});
  if (!layout.ok()) return 1;
  Rig rig;
  auto publisher = Publisher::create(*layout);
  if (!publisher.ok()) return 1;
  rig.publisher = std::move(*publisher);
  SubscriberOptions sopts;
  sopts.transport = transport;
  auto sub = Subscriber::connect(rig.publisher->address(), sopts);
  if (!sub.ok()) {
    std::fprintf(stderr, "%s\n", sub.status().to_string().c_str());
    return 1;
  }
  rig.subscriber = std::move(*sub);
  auto region = HostBuffer::allocate(layout->total_bytes());
  if (!region.ok()) return 1;
  rig.region = std::move(*region);
  timed_pulls(rig, 3);  // warm-up: page faults, registrations

  const std::vector<std::string> modes = {"off", "on", "scraped", "off-again"};
  std::map<std::string, std::vector<double>> gbps;
  std::uint64_t scrapes = 0;
  for (int r = 0; r < runs; ++r) {
    for (std::size_t m = 0; m < modes.size(); ++m) {
      const std::string& mode = modes[(m + static_cast<std::size_t>(r)) % modes.size()];
      const double g = run_mode(rig, mode, pulls, &scrapes);
      gbps[mode].push_back(g);
      std::printf("run %d %-9s %s %.3f GB/s\n", r + 1, mode.c_str(), transport.c_str(), g);
    }
  }
  {
    MetricsOptions quiet;  // no HTTP: scrape() alone
    auto endpoint = MetricsEndpoint::start(quiet);
    if (!endpoint.ok()) return 1;
    (*endpoint)->add_publisher(*rig.publisher, "trainer");
    (*endpoint)->add_subscriber(*rig.subscriber, "generator");
    std::vector<double> scrape_us;
    std::size_t scrape_bytes = 0;
    for (int i = 0; i < 201; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      scrape_bytes = (*endpoint)->scrape().size();
      scrape_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> snapshot_ns;
    for (int i = 0; i < 201; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < 1000; ++k) {
        const SubscriberStats s = rig.subscriber->stats_snapshot();
        if (s.pulls == UINT64_MAX) std::printf("-");
      }
      snapshot_ns.push_back(
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1000.0);
    }
    const double pull_s = static_cast<double>(bytes) / (median(gbps["off"]) * 1e9);
    std::printf("scrape(): median %.1f us over 201 (%zu bytes); every 100 ms that is %.3f%% of one core\n",
                median(scrape_us), scrape_bytes, median(scrape_us) / 1e5 * 100.0);
    std::printf("stats_snapshot(): median %.1f ns; per pull of %.2f ms that is %.5f%%\n", median(snapshot_ns),
                pull_s * 1e3, median(snapshot_ns) * 1e-9 / pull_s * 100.0);
  }
  const double base = median(gbps["off"]);
  std::map<std::string, std::vector<double>> ratios;
  for (int r = 0; r < runs; ++r) {
    for (const auto& mode : modes) ratios[mode].push_back(gbps[mode][r] / gbps["off"][r]);
  }
  std::printf("transport %s, %llu MiB x %d pulls, %d interleaved runs, %llu scrapes answered\n",
              transport.c_str(), static_cast<unsigned long long>(bytes >> 20), pulls, runs,
              static_cast<unsigned long long>(scrapes));
  for (const auto& mode : modes) {
    const double m = median(gbps[mode]);
    std::printf("median %-9s %.3f GB/s  %+.2f%% vs off's median; median of same-run ratios %+.2f%%\n",
                mode.c_str(), m, (m / base - 1.0) * 100.0, (median(ratios[mode]) - 1.0) * 100.0);
  }
  return 0;
}
