// FanoutCli: the options of `weightsync-bench fanout` and of its hidden roles.
#include "fanout_cli.h"

#include "cli_values.h"
#include "fanout_topology.h"

#include <unistd.h>

#include <filesystem>
#include <sstream>

namespace wsbench {
namespace {

// scripts/testbed.sh: above the executable (a build tree inside the
// repository), else in the source tree this was built from.
std::string default_testbed_script(const std::string& self_exe) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(self_exe).parent_path();
  for (int up = 0; up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (fs::exists(dir / "scripts" / "testbed.sh")) return (dir / "scripts" / "testbed.sh").string();
    if (dir == dir.parent_path()) break;
  }
  return std::string(WEIGHTSYNC_SOURCE_DIR) + "/scripts/testbed.sh";
}

}  // namespace

FanoutCli::FanoutCli(CLI::App& app) {
  fanout_ = app.add_subcommand(
      "fanout",
      "Time until every generator holds version v, across test-bed hosts (scripts/testbed.sh: one network "
      "namespace per host, links capped with --rate): the publisher in host 0, a subscriber in each of hosts "
      "1..N, wired flat, as a K-ary tree of relays or as a chain; beside iperf3, a raw TCP stream and "
      "MPI_Bcast on the same links. Needs root (network namespaces). docs/perf/fanout.md");
  fanout_->add_option("--subscribers", config_.subscribers, "Subscriber hosts N (the bed has N+1 hosts)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  fanout_->add_option("--sizes", sizes_, "Image sizes, comma-separated (B, KiB, MiB, GiB)")
      ->capture_default_str();
  fanout_
      ->add_option("--rate", config_.rate,
                   "Link cap per host, both directions (tc rate: 1gbit, 200mbit; none: unshaped)")
      ->capture_default_str();
  fanout_
      ->add_option("--topologies", topologies_,
                   "flat (all pull from host 0), treeK (host i pulls from host (i-1)/K's relay), chain "
                   "(host i from host i-1's relay, pipelined)")
      ->capture_default_str();
  fanout_
      ->add_option("--runs", config_.runs,
                   "Measured versions per row R (medians are reported), after one warm-up")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  fanout_
      ->add_option("--transport", config_.transport,
                   "The cross-host transport subscribers and relays pull over")
      ->capture_default_str();
  fanout_->add_option("--out", config_.out_dir,
                      "Write fanout.json, fanout.txt and fanout.png (gnuplot) to DIR");
  fanout_
      ->add_option("--baselines", baselines_,
                   "Same-run baselines on the same links: iperf3 (host 0 -> 1, one stream: L), stream (raw "
                   "TCP, S bytes host 0 -> 1), mpi (MPI_Bcast over all hosts, Open MPI TCP BTL); '' for none")
      ->capture_default_str();
  fanout_->add_option("--iperf3-seconds", config_.iperf3_seconds, "iperf3 run length")
      ->check(CLI::Range(1.0, 60.0))
      ->capture_default_str();
  fanout_->add_option("--relay-chunk", relay_chunk_,
                      "Relays' forwarding chunk (RelayOptions::chunk_bytes; B, KiB, MiB); default: the library's");
  fanout_->add_option("--testbed-script", config_.testbed_script,
                      "scripts/testbed.sh (default: found above this executable, else in its source tree)");

  // The per-host processes (not for direct use).
  publisher_ = app.add_subcommand("fanout-publisher", "")->group("");
  publisher_->add_option("--bind", bind_)->required();
  publisher_->add_option("--size", size_)->required();
  subscriber_ = app.add_subcommand("fanout-subscriber", "")->group("");
  subscriber_->add_option("--upstream", upstream_)->required();
  subscriber_->add_option("--size", size_)->required();
  subscriber_->add_option("--transport", transport_);
  relay_ = app.add_subcommand("fanout-relay", "")->group("");
  relay_->add_option("--upstream", upstream_)->required();
  relay_->add_option("--bind", bind_)->required();
  relay_->add_option("--transport", transport_);
  relay_->add_flag("--no-pipeline", no_pipeline_);
  relay_->add_option("--chunk", chunk_);
  stream_recv_ = app.add_subcommand("fanout-stream-recv", "")->group("");
  stream_recv_->add_option("--bind", bind_)->required();
  stream_send_ = app.add_subcommand("fanout-stream-send", "")->group("");
  stream_send_->add_option("--peer", peer_)->required();
}

std::optional<int> FanoutCli::run(const std::string& self_exe, const std::string& command_line) {
  if (*publisher_) return run_fanout_publisher(bind_, std::stoull(size_));
  if (*subscriber_) return run_fanout_subscriber(upstream_, std::stoull(size_), transport_);
  if (*relay_) return run_fanout_relay(upstream_, bind_, transport_, !no_pipeline_, chunk_);
  if (*stream_recv_) return run_fanout_stream_receiver(bind_);
  if (*stream_send_) return run_fanout_stream_sender(peer_);
  if (!*fanout_) return std::nullopt;

  config_.self_exe = self_exe;
  config_.command_line = command_line;
  for (const auto& s : split_list(sizes_)) config_.sizes.push_back(parse_bytes(s, "--sizes", 4096));
  if (!relay_chunk_.empty()) config_.relay_chunk = parse_bytes(relay_chunk_, "--relay-chunk", 4096);
  config_.topologies = split_list(topologies_);
  config_.baselines = split_list(baselines_);
  if (config_.sizes.empty()) {
    std::fprintf(stderr, "weightsync-bench fanout: --sizes is empty\n");
    return 2;
  }
  for (const auto& t : config_.topologies) {
    if (!fanout_topology_valid(t)) {
      std::fprintf(stderr, "weightsync-bench fanout: unknown topology '%s' (flat, treeK, chain)\n",
                   t.c_str());
      return 2;
    }
  }
  for (const auto& b : config_.baselines) {
    if (b != "iperf3" && b != "stream" && b != "mpi") {
      std::fprintf(stderr, "weightsync-bench fanout: unknown baseline '%s' (iperf3, stream, mpi)\n",
                   b.c_str());
      return 2;
    }
  }
  if (config_.rate != "none" && bytes_per_second_of_rate(config_.rate) <= 0) {
    std::fprintf(stderr, "weightsync-bench fanout: --rate '%s' is not a tc rate (1gbit, 200mbit) or none\n",
                 config_.rate.c_str());
    return 2;
  }
  if (config_.testbed_script.empty()) config_.testbed_script = default_testbed_script(self_exe);
  config_.testbed_script = std::filesystem::absolute(config_.testbed_script).string();
  if (::access(config_.testbed_script.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "weightsync-bench fanout: %s is not there (or not executable): --testbed-script\n",
                 config_.testbed_script.c_str());
    return 2;
  }
  const auto mpi = std::filesystem::path(self_exe).parent_path() / "weightsync-mpi-bcast";
  if (::access(mpi.c_str(), X_OK) == 0) config_.mpi_exe = mpi.string();
  if (!config_.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config_.out_dir, ec);
    if (ec) {
      std::fprintf(stderr, "weightsync-bench fanout: cannot create %s: %s\n", config_.out_dir.c_str(),
                   ec.message().c_str());
      return 2;
    }
  }
  return run_fanout(config_);
}

}  // namespace wsbench
