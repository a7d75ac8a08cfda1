// run_fanout(): makes the test bed (N+1 hosts), measures iperf3 once, then per
// size the raw stream, MPI_Bcast and every topology on the same links, and
// writes the report. The bed is removed on every way out.
#include <unistd.h>

#include <chrono>
#include <random>

#include "fanout_testbed.h"
#include "fanout_topology.h"
#include "machine.h"

namespace wsbench {
namespace {

std::string random_secret() {
  std::random_device device;
  static const char hex[] = "0123456789abcdef";
  std::string secret;
  for (int i = 0; i < 32; ++i) secret += hex[device() % 16];
  return secret;
}

std::string size_label(std::uint64_t bytes) {
  if (bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

bool wanted(const std::vector<std::string>& list, const std::string& name) {
  for (const auto& x : list) {
    if (x == name) return true;
  }
  return false;
}

}  // namespace

int run_fanout(const FanoutConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  std::string why;
  if (!TestBed::check(config.testbed_script, &why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  FanoutReport report;
  report.config = config;
  report.machine = describe_machine(MemoryShown::kNo);
  const int hosts = config.subscribers + 1;
  {
    TestBed bed(config.testbed_script, &report.commands);
    report.bed = "wsf" + std::to_string(::getpid() % 100000);
    std::printf("fanout: test bed %s, %d hosts, rate %s\n", report.bed.c_str(), hosts, config.rate.c_str());
    std::fflush(stdout);
    if (!bed.up(report.bed, hosts, config.rate, &why)) {
      std::fprintf(stderr, "fanout: %s\n", why.c_str());
      return 1;
    }
    report.hosts = bed.hosts();
    const std::string secret = random_secret();
    if (wanted(config.baselines, "iperf3")) {
      report.iperf3_bytes_per_s = measure_iperf3_between(bed, config.iperf3_seconds, &report.iperf3_note);
      std::printf("  iperf3: %.3f Gbit/s (%s)\n", report.iperf3_bytes_per_s * 8e-9,
                  report.iperf3_note.c_str());
      std::fflush(stdout);
    }
    for (std::uint64_t size : config.sizes) {
      TopologyRun run;
      run.config = &config;
      run.bed = &bed;
      run.size = size;
      run.size_label = size_label(size);
      run.secret = secret;
      if (wanted(config.baselines, "stream")) report.rows.push_back(measure_stream_between(run));
      if (wanted(config.baselines, "mpi")) report.rows.push_back(measure_mpi_bcast(run, &report.commands));
      for (const auto& topology : config.topologies) {
        run.topology = topology;
        report.rows.push_back(run_topology(run));
      }
    }
  }  // the bed is removed here
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fanout_evaluate_targets(&report);
  std::printf("\n");
  fanout_print(stdout, report);
  int rc = 0;
  for (const auto& row : report.rows) {
    if (!row.error.empty() && row.error.rfind("not built", 0) != 0 &&
        row.error.rfind("relays not built", 0) != 0) {
      rc = 1;
    }
  }
  if (!config.out_dir.empty()) {
    std::string error;
    const std::string base = config.out_dir + "/fanout";
    if (std::FILE* out = std::fopen((base + ".txt").c_str(), "w")) {
      fanout_print(out, report);
      std::fclose(out);
    } else {
      std::fprintf(stderr, "fanout: cannot write %s.txt\n", base.c_str());
      rc = 1;
    }
    if (!fanout_write_json(base + ".json", report, &error)) {
      std::fprintf(stderr, "fanout: %s\n", error.c_str());
      rc = 1;
    }
    if (!fanout_write_plot(base + ".png", report, &error)) {
      std::fprintf(stderr, "fanout: %s\n", error.c_str());
      rc = 1;
    }
    std::printf("\nfanout: wrote %s.json, %s.txt, %s.png\n", base.c_str(), base.c_str(), base.c_str());
  }
  return rc;
}

}  // namespace wsbench
