// weightsync-bench: pull bandwidth and latency of every weightsync transport,
// next to the limits of the machine measured in the same run; with a CUDA
// device (--gpu), the GPU rows next to the cudaMemcpy limits (gpu_rows.h).
//
//   weightsync-bench [options]                 everything on this host
//   weightsync-bench server [--bind --port]    the publisher side, for another host
//   weightsync-bench client HOST:PORT [opts]   the reader side, against a server
//   weightsync-bench fanout [opts]             time-to-all-generators across test-bed hosts (fanout.h)
//   weightsync-bench sharded [opts]            R publishers x T readers (sharded sync) beside one
//                                              publisher of the same bytes, same run (sharded.h)
//   weightsync-bench pause [opts]              the engine's pause per update: foreground pull vs
//                                              StagedUpdates swap and copy, same run (pause_bench.h)
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cli_values.h"
#include "cuda_limits.h"
#include "fanout_cli.h"
#include "gpu_rows.h"
#include "line_stream.h"
#include "pause_cli.h"
#include "report.h"
#include "roles.h"
#include "sharded.h"
#include "sweep.h"
#include "weightsync/weightsync.h"

namespace {

using wsbench::CellSpec;
using wsbench::TransportSpec;

std::string self_executable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  return std::string(path, static_cast<std::size_t>(n));
}

int run_server(const std::string& bind, std::uint16_t port, std::size_t slots) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(bind.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    std::fprintf(stderr, "weightsync-bench server: cannot resolve %s\n", bind.c_str());
    return 2;
  }
  int listener = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (listener < 0 || ::bind(listener, found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(listener, 4) != 0) {
    std::fprintf(stderr, "weightsync-bench server: cannot listen on %s:%u (%s)\n", bind.c_str(), port,
                 std::strerror(errno));
    ::freeaddrinfo(found);
    return 2;
  }
  ::freeaddrinfo(found);
  std::printf("weightsync-bench server: waiting for a client on %s:%u (Ctrl-C to stop)\n", bind.c_str(),
              port);
  std::fflush(stdout);
  for (;;) {
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::printf("weightsync-bench server: client connected\n");
    std::fflush(stdout);
    wsutil::LineStream stream(fd, fd);
    wsbench::PublisherRoleConfig config;
    config.bind = bind;
    config.slots = slots;
    wsbench::run_publisher_role(stream, config);
    std::printf("weightsync-bench server: client done\n");
    std::fflush(stdout);
  }
}

// "NVIDIA H100 80GB HBM3, CUDA runtime 13000, driver 13000".
std::string describe_device(const weightsync::CudaInfo& info) {
  return info.device_name + ", CUDA runtime " + std::to_string(info.runtime_version) + ", driver " +
         std::to_string(info.driver_version);
}

std::optional<weightsync::TransportInfo> transport_info(const std::string& name) {
  for (const auto& t : weightsync::available_transports()) {
    if (t.name == name) return t;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{
      "weightsync-bench: pull bandwidth and latency of every weightsync transport, beside the limits of this "
      "machine (memcpy, raw TCP, iperf3, ucx_perftest, a checkpoint file) measured in the same run; with a "
      "CUDA "
      "device, the GPU rows beside pinned D2H / H2D and D2D cudaMemcpy (--gpu). `sharded`: R publishers x T "
      "readers beside a single publisher of the same bytes. `pause`: the engine's pause per update, "
      "foreground pull vs StagedUpdates swap and copy.\n"
      "GB = 10^9 bytes. Figures are medians over --reps pulls per reader after a warm-up."};
  app.require_subcommand(0, 1);

  std::string transports_arg = "verbs,ucx,shm,tcp";
  std::vector<std::string> ucx_tls = {"posix,self", "sysv,self", "tcp,self"};
  std::string sizes_arg = "1MiB,4MiB,16MiB,64MiB,256MiB,1GiB";
  std::string readers_arg = "1,2,4";
  int reps = 10, warmup = 3, compute_rounds = 3;
  double min_gb = 2.5;
  bool quick = false;
  std::string csv, json, plot, checkpoint_dir = "/var/tmp", gpu_arg = "auto";
  double iperf3_seconds = 2.0;
  std::vector<CLI::Option*> tls_options;
  auto add_sweep_options = [&](CLI::App* a) {
    a->add_option("--transports", transports_arg, "Transports to measure, comma-separated")
        ->capture_default_str();
    tls_options.push_back(
        a->add_option("--ucx-tls", ucx_tls,
                      "UCX_TLS values for the ucx rows (repeat the option; --quick: posix,self)")
            ->capture_default_str());
    a->add_option("--sizes", sizes_arg, "Image sizes, comma-separated (B, KiB, MiB, GiB)")
        ->capture_default_str();
    a->add_option("--readers", readers_arg, "Reader counts, comma-separated")->capture_default_str();
    a->add_option("--reps", reps, "Measured pulls per reader per cell (>= 10 for published figures)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    a->add_option("--min-gb-per-cell", min_gb,
                  "Measure at least this many GB per reader per cell (up to 200 pulls): short windows are "
                  "noisy")
        ->check(CLI::Range(0.0, 1000.0))
        ->capture_default_str();
    a->add_option("--warmup", warmup, "Warm-up pulls per cell (at least 3: every slot once)")
        ->check(CLI::Range(0, 1000))
        ->capture_default_str();
    a->add_option("--compute-rounds", compute_rounds,
                  "Extra pulls with the publisher's compute loop running (0: skip)")
        ->check(CLI::Range(0, 1000))
        ->capture_default_str();
    a->add_flag(
        "--quick", quick,
        "Preset: every transport at 64 MiB with 1 reader, shm at 1 GiB, the baselines (and the GPU rows at "
        "64 MiB); under 60 s here");
    a->add_option("--csv", csv, "Write the cells as CSV to FILE");
    a->add_option("--json", json, "Write cells, baselines and target checks as JSON to FILE");
    a->add_option("--plot", plot, "Draw bandwidth vs size with the limits to FILE.png (gnuplot)");
    a->add_option("--checkpoint-dir", checkpoint_dir, "Where the checkpoint-file baseline writes (a disk)")
        ->capture_default_str();
    a->add_option("--iperf3-seconds", iperf3_seconds, "iperf3 run length (0: skip iperf3)")
        ->capture_default_str();
    a->add_option("--gpu", gpu_arg,
                  "GPU rows at every size, 1 reader: publish_from_device() into host slots vs pinned D2H "
                  "cudaMemcpy; a staged pull into cudaMalloc memory over each transport vs the slower of its "
                  "host pull and pinned H2D; cuda_ipc from device slots vs D2D. auto: when a CUDA device is "
                  "usable (else reported as not measured, with why); on: exit 2 without one; off: skip")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
  };
  add_sweep_options(&app);

  auto* server = app.add_subcommand("server", "Serve the publisher side for `weightsync-bench client`");
  std::string server_bind = "127.0.0.1";
  std::uint16_t server_port = 18600;
  std::size_t server_slots = 3;
  server->add_option("--bind", server_bind, "Address to listen on (non-loopback needs WEIGHTSYNC_SECRET)")
      ->capture_default_str();
  server->add_option("--port", server_port, "Control port")->capture_default_str();
  server->add_option("--slots", server_slots, "Publisher ring slots")->capture_default_str();

  auto* client = app.add_subcommand("client", "Run the readers here against `weightsync-bench server`");
  std::string remote;
  client->add_option("server", remote, "HOST:PORT of the server")->required();
  add_sweep_options(client);

  // Redraw the charts of an earlier run from its JSON, measuring nothing.
  auto* replot =
      app.add_subcommand("replot", "Redraw --plot's charts from the --json file of an earlier run");
  std::string replot_from, replot_plot;
  replot->add_option("--from", replot_from, "The JSON file a run wrote with --json")->required();
  replot
      ->add_option("--plot", replot_plot,
                   "Draw the panels to FILE.png and the fraction-of-limit chart to FILE-fraction.png")
      ->required();

  // The per-cell processes (not for direct use).
  auto* publisher_role = app.add_subcommand("publisher-role", "")->group("");
  auto* reader_role = app.add_subcommand("reader-role", "")->group("");
  wsbench::ReaderRoleConfig reader_config;
  std::string reader_size;
  reader_role->add_option("--address", reader_config.address)->required();
  reader_role->add_option("--transport", reader_config.transport)->required();
  reader_role->add_option("--size", reader_config.size)->required();
  reader_role->add_option("--destination", reader_config.destination);

  // `fanout` (across test-bed hosts) and its per-host roles: fanout_cli.h.
  wsbench::FanoutCli fanout(app);
  // `sharded` (R publishers x T readers) and its roles: sharded.h.
  wsbench::ShardedCli sharded(app);
  // `pause` (the engine's pause per update): pause_cli.h.
  wsbench::PauseCli pause(app);

  CLI11_PARSE(app, argc, argv);

  if (*publisher_role) {
    wsutil::LineStream io(0, 1);
    return wsbench::run_publisher_role(io, wsbench::PublisherRoleConfig{});
  }
  if (*reader_role) {
    wsutil::LineStream io(0, 1);
    return wsbench::run_reader_role(io, reader_config);
  }
  if (*server) return run_server(server_bind, server_port, server_slots);
  {
    std::ostringstream command;
    for (int i = 0; i < argc; ++i) command << (i ? " " : "") << argv[i];
    if (auto rc = fanout.run(self_executable(), command.str())) return *rc;
    if (auto rc = sharded.run(self_executable(), command.str())) return *rc;
    if (auto rc = pause.run(command.str())) return *rc;
  }
  if (*replot) {
    wsbench::BenchReport loaded;
    std::string error;
    if (!wsbench::load_report_json(replot_from, &loaded, &error) ||
        !wsbench::write_plot(replot_plot, loaded, &error)) {
      std::fprintf(stderr, "weightsync-bench replot: %s\n", error.c_str());
      return 1;
    }
    std::printf("weightsync-bench replot: wrote %s and %s\n", replot_plot.c_str(),
                wsbench::fraction_plot_path(replot_plot).c_str());
    return 0;
  }

  wsbench::SweepConfig config;
  config.self_exe = self_executable();
  config.remote = remote;
  config.repetitions = reps;
  config.min_gb_per_cell = min_gb;
  config.warmup = warmup;
  config.compute_rounds = compute_rounds;
  config.checkpoint_dir = checkpoint_dir;
  config.iperf3_seconds = iperf3_seconds;

  bool tls_given = false;
  for (const CLI::Option* o : tls_options) tls_given = tls_given || o->count() > 0;
  if (quick && !tls_given) ucx_tls = {"posix,self"};

  // Which transports: built and (for verbs) viable; shm only on one host.
  std::vector<TransportSpec> transports;
  for (const std::string& name : wsbench::split_list(transports_arg)) {
    auto info = transport_info(name);
    if (!info) {
      std::fprintf(stderr, "weightsync-bench: unknown transport '%s' (verbs, ucx, shm, tcp)\n", name.c_str());
      return 2;
    }
    if (name == "ucx") {
      if (info->reason.find("built without") != std::string::npos) {
        std::fprintf(stderr, "skipping ucx: %s\n", info->reason.c_str());
        continue;
      }
      for (const auto& tls : ucx_tls) transports.push_back({"ucx", tls});
      continue;
    }
    if (name == "cuda_ipc") {
      std::fprintf(stderr,
                   "skipping cuda_ipc as a host row: it reads device slots only (a GPU row, --gpu)\n");
      continue;
    }
    if (name == "shm" && !remote.empty()) {
      std::fprintf(stderr, "skipping shm: the server is another host\n");
      continue;
    }
    if (!info->viable) {
      std::fprintf(stderr, "skipping %s: not viable here: %s\n", name.c_str(), info->reason.c_str());
      continue;
    }
    transports.push_back({name, ""});
  }
  std::vector<std::uint64_t> sizes;
  std::vector<int> readers;
  if (quick) {
    sizes = {64ull << 20};
    readers = {1};
    // The checkpoint target is at 1 GiB; the disk variant at 64 MiB keeps it short.
    config.checkpoint_sizes = {1ull << 30};
    config.checkpoint_fsync_sizes = {64ull << 20};
  } else {
    for (const auto& s : wsbench::split_list(sizes_arg)) sizes.push_back(wsbench::parse_bytes(s, "size", 4096));
    for (const auto& r : wsbench::split_list(readers_arg)) readers.push_back(std::stoi(r));
    config.checkpoint_sizes = sizes;
    config.checkpoint_fsync_sizes = sizes;
  }
  for (const auto& t : transports) {
    for (std::uint64_t size : sizes) {
      for (int r : readers) config.cells.push_back(CellSpec{t, size, r});
    }
  }
  if (quick) {
    // The checkpoint target is at 1 GiB: one same-host transport there too.
    // Its compute-loop figure and memcpy baselines come from the 64 MiB rows
    // (first touches of fresh memory are slow on VMs: this keeps --quick short).
    for (const auto& t : transports) {
      if (t.transport == "shm") config.cells.push_back(CellSpec{t, 1ull << 30, 1, 0});
    }
    config.memcpy_sizes = {64ull << 20};
  }
  if (config.cells.empty()) {
    std::fprintf(stderr, "weightsync-bench: nothing to measure (see the skipped transports above)\n");
    return 2;
  }

  // The GPU rows: at the sweep's sizes, 1 reader each (gpu_rows.h).
  wsbench::GpuFlag gpu_flag = wsbench::GpuFlag::kAuto;
  wsbench::parse_gpu_flag(gpu_arg, &gpu_flag);
  weightsync::CudaInfo cuda;
  if (gpu_flag != wsbench::GpuFlag::kOff) cuda = weightsync::cuda_info();
  const wsbench::GpuDecision gpu =
      wsbench::decide_gpu(gpu_flag, cuda.usable, cuda.reason, wsbench::cuda_runtime_built(), !remote.empty());
  if (gpu.fatal) {
    std::fprintf(stderr, "weightsync-bench: --gpu on, but the GPU rows and limits are not measured: %s\n",
                 gpu.not_measured.c_str());
    return 2;
  }
  config.gpu_mode = wsbench::gpu_flag_name(gpu_flag);
  config.gpu_not_measured = gpu.not_measured;
  if (gpu.measure) config.gpu_device = describe_device(cuda);
  config.gpu_cells = wsbench::plan_gpu_cells(transports, sizes);
  std::ostringstream command;
  for (int i = 0; i < argc; ++i) command << (i ? " " : "") << argv[i];

  const auto start = std::chrono::steady_clock::now();
  wsbench::BenchReport report = wsbench::run_sweep(config, stdout);
  report.command_line = command.str();
  report.reference_size = sizes.back() >= (64ull << 20) ? 64ull << 20 : sizes.back();
  for (auto s : sizes) {
    if (s >= (64ull << 20)) {
      report.reference_size = s;
      break;
    }
  }
  std::printf("\n");
  wsbench::print_table(stdout, report);
  const auto checks = wsbench::evaluate_targets(report);
  std::printf("\n");
  wsbench::print_targets(stdout, checks);

  int rc = 0;
  std::string error;
  if (!csv.empty() && !wsbench::write_csv(csv, report, &error)) {
    std::fprintf(stderr, "weightsync-bench: %s\n", error.c_str());
    rc = 1;
  }
  if (!json.empty() && !wsbench::write_json(json, report, checks, &error)) {
    std::fprintf(stderr, "weightsync-bench: %s\n", error.c_str());
    rc = 1;
  }
  if (!plot.empty() && !wsbench::write_plot(plot, report, &error)) {
    std::fprintf(stderr, "weightsync-bench: %s\n", error.c_str());
    rc = 1;
  }
  std::size_t failed = 0;
  for (const auto& r : report.records) failed += r.error.empty() ? 0 : 1;
  std::size_t gpu_measured = 0;
  for (const auto& r : report.gpu.records) {
    failed += r.error.empty() ? 0 : 1;
    gpu_measured += r.not_measured.empty() ? 1 : 0;
  }
  std::printf("\nweightsync-bench: %zu cells, %zu GPU rows, %zu failed, %.1f s\n", report.records.size(),
              gpu_measured, failed,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return failed > 0 ? 1 : rc;
} catch (const std::exception& e) {
  std::fprintf(stderr, "weightsync-bench: %s\n", e.what());
  return 2;
}
