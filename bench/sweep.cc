// run_sweep(): baselines first, then each cell as a publisher process (or a
// remote server) and N reader processes driven over the roles.h protocol,
// then the CUDA copy limits and the GPU rows the same way.
#include "sweep.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "baselines.h"
#include "child_process.h"
#include "cuda_limits.h"
#include "gpu_rows.h"
#include "line_stream.h"
#include "report.h"
#include "stats.h"

namespace wsbench {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct CellError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The publisher side of a cell: a local child or a remote server connection.
class PublisherLink {
 public:
  virtual ~PublisherLink() = default;
  virtual bool send(const std::string& line) = 0;
  virtual std::optional<std::string> receive(milliseconds timeout) = 0;
};

class ChildPublisher final : public PublisherLink {
 public:
  explicit ChildPublisher(wsutil::ChildProcess child) : child_(std::move(child)) {}
  ~ChildPublisher() override {
    try {
      child_.write_line("QUIT");
    } catch (...) {
    }
    if (!child_.wait(seconds(10))) child_.signal(SIGKILL);
  }
  bool send(const std::string& line) override {
    try {
      child_.write_line(line);
      return true;
    } catch (...) {
      return false;
    }
  }
  std::optional<std::string> receive(milliseconds timeout) override { return child_.read_line(timeout); }

 private:
  wsutil::ChildProcess child_;
};

class RemotePublisher final : public PublisherLink {
 public:
  explicit RemotePublisher(wsutil::LineStream* stream) : stream_(stream) {}
  ~RemotePublisher() override {
    if (stream_->write_line("TEARDOWN")) (void)stream_->read_line(seconds(30));
  }
  bool send(const std::string& line) override { return stream_->write_line(line); }
  std::optional<std::string> receive(milliseconds timeout) override { return stream_->read_line(timeout); }

 private:
  wsutil::LineStream* stream_;
};

std::string expect(const std::optional<std::string>& line, const std::string& prefix, const std::string& who,
                   milliseconds timeout) {
  if (!line) {
    throw CellError(who + " did not answer within " + std::to_string(timeout.count() / 1000) +
                    " s (or exited; see its messages above)");
  }
  if (line->rfind("ERROR ", 0) == 0) throw CellError(who + ": " + line->substr(6));
  if (line->rfind(prefix, 0) != 0) throw CellError(who + " answered '" + *line + "', expected " + prefix);
  return line->substr(prefix.size());
}

std::vector<std::string> cell_environment(const TransportSpec& t) {
  std::vector<std::string> env = {"WEIGHTSYNC_LOG_LEVEL=error"};
  if (t.transport == "ucx") {
    env.push_back("UCX_TLS=" + t.detail);
    if (t.detail.find("tcp") != std::string::npos) {
      // UCX emulates RMA over tcp; weightsync offers it only when told to
      // (docs/transports.md: any peer can then read and write the publisher's
      // memory). The bench accepts the risk to measure it, on loopback.
      env.push_back("WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA=1");
    } else {
      // UCX's shared memory reaches only slots UCX allocated, which are mapped
      // writable into every ucx subscriber: an explicit opt-in (docs/security.md).
      env.push_back("WEIGHTSYNC_SLOT_ALLOCATOR=ucx");
    }
  }
  return env;
}

// "0.0.0.0:1234" from a remote server means "the server's host, port 1234".
std::string reachable_address(const std::string& address, const std::string& remote) {
  if (remote.empty()) return address;
  const auto colon = address.rfind(':');
  const std::string host = address.substr(0, colon);
  if (host != "0.0.0.0" && host != "[::]" && host != "::") return address;
  return remote.substr(0, remote.rfind(':')) + address.substr(colon);
}

wsutil::LineStream connect_control(const std::string& remote) {
  const auto colon = remote.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("server address must be HOST:PORT, not " + remote);
  std::string host = remote.substr(0, colon);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), remote.substr(colon + 1).c_str(), &hints, &found) != 0 || !found) {
    throw std::runtime_error("cannot resolve " + remote);
  }
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int rc = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (rc != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot connect to the bench server at " + remote +
                             " (is `weightsync-bench server` running there?)");
  }
  return wsutil::LineStream(fd, fd);
}

struct Reader {
  wsutil::ChildProcess process;
  std::string name;
};

// Measured pulls per reader: at least --reps, and at least --min-gb-per-cell
// worth (up to 200), so a measurement spans a quarter second or more: this machine's
// noise is large on shorter windows.
int reps_for_cell(const SweepConfig& config, std::uint64_t size) {
  const auto floor = static_cast<int>(std::ceil(config.min_gb_per_cell * 1e9 / static_cast<double>(size)));
  return std::max(config.repetitions, std::min(200, floor));
}

// Baselines: as many repetitions as a cell of that size, but at most 5 from
// 256 MiB up (each takes long, and their spread is small there).
int reps_at(const SweepConfig& config, std::uint64_t size) {
  const int reps = reps_for_cell(config, size);
  return size >= (256ull << 20) ? std::min(reps, 5) : reps;
}

// `halfway` runs between the two halves of the measured pulls (the sweep
// measures the cell's limit there).
CellRecord run_cell(const SweepConfig& config, const CellSpec& spec, wsutil::LineStream* remote,
                    const std::function<void()>& halfway) {
  CellRecord record;
  record.transport = spec.transport.transport;
  record.detail = spec.transport.detail;
  record.size_bytes = spec.size;
  record.readers = spec.readers;
  record.gpu_mode = gpu_row_name(spec.gpu);
  try {
    const auto env = cell_environment(spec.transport);
    std::unique_ptr<PublisherLink> publisher;
    if (remote != nullptr) {
      publisher = std::make_unique<RemotePublisher>(remote);
    } else {
      publisher = std::make_unique<ChildPublisher>(
          wsutil::ChildProcess::spawn({config.self_exe, "publisher-role"}, env));
    }
    const auto setup_timeout = seconds(120);
    // SETUP <size> <source> <slots> (roles.h); host rows keep the short form a server understands.
    std::string setup = "SETUP " + std::to_string(spec.size);
    if (spec.gpu == GpuRow::kPublishFromDevice) setup += " cuda host";
    if (spec.gpu == GpuRow::kCudaIpc) setup += " host cuda";
    publisher->send(setup);
    std::istringstream ready(expect(publisher->receive(setup_timeout), "READY ", "publisher", setup_timeout));
    std::string address, allocator;
    ready >> address >> allocator;
    address = reachable_address(address, config.remote);

    const bool cuda_destination = spec.gpu == GpuRow::kStagedPull || spec.gpu == GpuRow::kCudaIpc;
    std::vector<Reader> readers;
    for (int i = 0; i < spec.readers; ++i) {
      readers.push_back(Reader{
          wsutil::ChildProcess::spawn(
              {config.self_exe, "reader-role", "--address", address, "--transport", spec.transport.transport,
               "--size", std::to_string(spec.size), "--destination", cuda_destination ? "cuda" : "host"},
              env),
          "reader " + std::to_string(i + 1)});
    }
    for (auto& r : readers) {
      const std::string transport = expect(r.process.read_line(seconds(60)), "READY ", r.name, seconds(60));
      if (transport != spec.transport.transport) {
        throw CellError(r.name + " connected over " + transport + ", not " + spec.transport.transport);
      }
    }

    std::vector<double> latencies, commit_to_all, publish_s, compute_rates, idle_rates, memcpy_s;
    double publisher_cpu = 0, reader_cpu = 0;
    std::uint64_t version = 0;
    const auto round_timeout = seconds(120);
    auto round = [&](bool record_it, bool computing) {
      ++version;
      for (auto& r : readers) r.process.write_line("PULL " + std::to_string(version));
      // The readers' paired memcpy first, so it never overlaps the publish.
      for (auto& r : readers) {
        const double copy_s =
            std::stod(expect(r.process.read_line(round_timeout), "COPIED ", r.name, round_timeout));
        if (record_it && copy_s > 0) memcpy_s.push_back(copy_s);  // 0: none (a cuda destination)
      }
      const auto sent = std::chrono::steady_clock::now();
      publisher->send("PUBLISH " + std::to_string(version));
      std::istringstream committed(
          expect(publisher->receive(round_timeout), "COMMITTED ", "publisher", round_timeout));
      std::uint64_t v = 0;
      double copy_s = 0;
      std::int64_t commit_ns = 0;
      committed >> v >> copy_s >> commit_ns;
      if (remote != nullptr) {
        // Across hosts the clocks differ: estimate the commit on this host's
        // clock as "PUBLISH sent + the publisher's copy" (half a round trip early).
        commit_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(sent.time_since_epoch()).count() +
                    static_cast<std::int64_t>(copy_s * 1e9);
      }
      std::int64_t last_held_ns = 0;
      std::vector<double> pulls, cpus;
      for (auto& r : readers) {
        std::istringstream held(expect(r.process.read_line(round_timeout), "HELD ", r.name, round_timeout));
        std::uint64_t got = 0;
        double pull_s = 0, cpu_s = 0;
        std::int64_t held_ns = 0;
        int staged = 0;
        held >> got >> pull_s >> held_ns >> cpu_s >> staged;
        if (got != version) {
          throw CellError(r.name + " delivered version " + std::to_string(got) + ", expected " +
                          std::to_string(version));
        }
        if (spec.gpu == GpuRow::kStagedPull && staged != 1) {
          throw CellError(r.name +
                          ": the pull into device memory did not go through the staging ring "
                          "(PullResult::staged is false)");
        }
        if (spec.gpu == GpuRow::kCudaIpc && staged != 0) {
          throw CellError(r.name + ": the cuda_ipc pull went through the staging ring, not device to device");
        }
        last_held_ns = std::max(last_held_ns, held_ns);
        pulls.push_back(pull_s);
        cpus.push_back(cpu_s);
      }
      publisher->send("SERVED");
      std::istringstream served(
          expect(publisher->receive(round_timeout), "SERVED ", "publisher", round_timeout));
      double served_cpu = 0, rate = 0, window_s = 0;
      served >> served_cpu >> rate >> window_s;
      if (computing) {
        // Pair every loaded window with an idle one of the same length, right
        // after it: slow drifts of the machine cancel out.
        compute_rates.push_back(rate);
        publisher->send("IDLE " + std::to_string(window_s));
        idle_rates.push_back(
            std::stod(expect(publisher->receive(seconds(30)), "IDLE ", "publisher", seconds(30))));
      }
      if (!record_it) return;
      latencies.insert(latencies.end(), pulls.begin(), pulls.end());
      for (double c : cpus) reader_cpu += c;
      publisher_cpu += served_cpu;
      publish_s.push_back(copy_s);
      commit_to_all.push_back(static_cast<double>(last_held_ns - commit_ns) * 1e-9);
    };
    for (int i = 0; i < std::max(config.warmup, 3); ++i) round(false, false);
    const int repetitions = reps_for_cell(config, spec.size);
    for (int i = 0; i < repetitions; ++i) {
      if (i == repetitions / 2) halfway();
      round(true, false);
    }
    const int compute_rounds = spec.compute_rounds >= 0 ? spec.compute_rounds : config.compute_rounds;
    if (compute_rounds > 0) {
      publisher->send("COMPUTE ON");
      expect(publisher->receive(seconds(30)), "COMPUTE ", "publisher", seconds(30));
      for (int i = 0; i < compute_rounds; ++i) round(false, true);
      publisher->send("COMPUTE OFF");
      expect(publisher->receive(seconds(30)), "COMPUTE OFF", "publisher", seconds(30));
      const double idle = median(idle_rates);
      if (idle > 0) record.compute_slowdown = 1.0 - median(compute_rates) / idle;
    }
    for (auto& r : readers) {
      r.process.write_line("QUIT");
      r.process.wait(seconds(10));
    }

    const double gb = static_cast<double>(spec.size) / 1e9;
    record.repetitions = repetitions;
    record.latency_s_median = median(latencies);
    record.latency_s_p99 = percentile(latencies, 99);
    record.gbps_median = gb / record.latency_s_median;
    record.gbps_p99 = gb / record.latency_s_p99;
    record.commit_to_all_s_median = median(commit_to_all);
    record.commit_to_all_s_p99 = percentile(commit_to_all, 99);
    record.publish_s_median = median(publish_s);
    record.memcpy_paired_gbps = gb / median(memcpy_s);
    if (spec.gpu == GpuRow::kPublishFromDevice) {
      // The row's figure is the device publish, enqueue to commit; the reader only checked the bytes.
      record.latency_s_median = record.publish_s_median;
      record.latency_s_p99 = percentile(publish_s, 99);
      record.gbps_median = gb / record.latency_s_median;
      record.gbps_p99 = gb / record.latency_s_p99;
    }
    const double delivered_gb = gb * spec.readers * repetitions;
    record.publisher_cpu_s_per_gb = publisher_cpu / delivered_gb;
    record.reader_cpu_s_per_gb = reader_cpu / delivered_gb;
  } catch (const std::exception& e) {
    record.error = e.what();
  }
  return record;
}

// The limit a cell is compared with, measured now at the cell's size; nullopt
// for transports without one (verbs) and across hosts.
std::optional<BaselineFigure> measure_limit(const SweepConfig& config, const CellSpec& cell,
                                            std::string* name) {
  if (!config.remote.empty()) return std::nullopt;
  const std::string& t = cell.transport.transport;
  if (t == "tcp") {
    *name = "tcp raw";
    return measure_tcp_raw(cell.size, reps_at(config, cell.size));
  }

  if (t == "ucx") {
    *name = "ucx_perftest";
    return measure_ucx_perftest(cell.transport.detail, cell.size, reps_at(config, cell.size));
  }
  return std::nullopt;
}

void attach_limit(CellRecord& record, const std::string& name, const std::vector<BaselineFigure>& figures) {
  std::vector<double> gbps;
  for (const auto& f : figures) {
    if (std::isnan(f.gbps)) return;
    gbps.push_back(f.gbps);
  }
  if (gbps.empty()) return;
  double sum = 0;
  for (double g : gbps) sum += g;
  record.limit_name = name;
  record.limit_gbps = sum / static_cast<double>(gbps.size());
  record.limit_spread =
      (*std::max_element(gbps.begin(), gbps.end()) - *std::min_element(gbps.begin(), gbps.end())) /
      record.limit_gbps;
  record.ratio_to_limit = record.gbps_median / record.limit_gbps;
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void report_baseline(std::FILE* progress, const std::string& name, std::uint64_t size,
                     const BaselineFigure& f) {
  if (std::isnan(f.gbps)) {
    std::fprintf(progress, "  %-34s %9s  not measured: %s\n", name.c_str(), format_size(size).c_str(),
                 f.note.c_str());
  } else {
    std::fprintf(progress, "  %-34s %9s  %7.2f GB/s\n", name.c_str(), format_size(size).c_str(), f.gbps);
  }
  std::fflush(progress);
}

std::string row_name(const CellSpec& spec) {
  std::string name =
      spec.transport.transport + (spec.transport.detail.empty() ? "" : " " + spec.transport.detail);
  if (spec.gpu == GpuRow::kPublishFromDevice) name = "publish from cuda (check: " + name + ")";
  if (spec.gpu == GpuRow::kStagedPull) name += " -> cuda, staged";
  if (spec.gpu == GpuRow::kCudaIpc) name += " -> cuda";
  return name + " " + format_size(spec.size) + " x" + std::to_string(spec.readers);
}

// The GPU part of the run: the CUDA copy limits at the GPU rows' sizes, then
// the rows; or, when they cannot be measured, every one of them recorded as
// not measured with the reason.
void run_gpu_rows(const SweepConfig& config, BenchReport& report, std::FILE* progress,
                  const std::function<double()>& elapsed) {
  GpuSection& g = report.gpu;
  g.mode = config.gpu_mode;
  g.not_measured = config.gpu_not_measured;
  g.device = config.gpu_device;
  std::set<std::uint64_t> sizes;
  for (const CellSpec& c : config.gpu_cells) sizes.insert(c.size);
  if (!g.not_measured.empty()) {
    BaselineFigure none;
    none.note = "not measured: " + g.not_measured;
    for (std::uint64_t size : sizes) g.d2h_pinned[size] = g.h2d_pinned[size] = g.d2d[size] = none;
    for (const CellSpec& spec : config.gpu_cells) {
      CellRecord r;
      r.transport = spec.transport.transport;
      r.detail = spec.transport.detail;
      r.size_bytes = spec.size;
      r.readers = spec.readers;
      r.gpu_mode = gpu_row_name(spec.gpu);
      r.not_measured = g.not_measured;
      g.records.push_back(std::move(r));
    }
    std::fprintf(progress, "GPU rows and limits: not measured: %s\n", g.not_measured.c_str());
    std::fflush(progress);
    return;
  }
  if (config.gpu_cells.empty()) return;
  std::fprintf(progress, "GPU limits on %s (cudaMemcpy, host clock, median):\n", g.device.c_str());
  for (std::uint64_t size : sizes) {
    const int reps = std::max(5, reps_at(config, size));
    g.d2h_pinned[size] = measure_cuda_copy(CudaCopy::kDeviceToPinnedHost, size, reps);
    report_baseline(progress, "D2H, device -> pinned host", size, g.d2h_pinned[size]);
    g.h2d_pinned[size] = measure_cuda_copy(CudaCopy::kPinnedHostToDevice, size, reps);
    report_baseline(progress, "H2D, pinned host -> device", size, g.h2d_pinned[size]);
    g.d2d[size] = measure_cuda_copy(CudaCopy::kDeviceToDevice, size, reps);
    report_baseline(progress, "D2D, device -> device", size, g.d2d[size]);
  }
  std::fprintf(progress, "GPU rows (%zu), 1 reader, no compute loop:\n", config.gpu_cells.size());
  std::size_t index = 0;
  for (const CellSpec& spec : config.gpu_cells) {
    ++index;
    std::fprintf(progress, "  [%zu/%zu] %-52s ", index, config.gpu_cells.size(), row_name(spec).c_str());
    std::fflush(progress);
    CellRecord record = run_cell(config, spec, nullptr, [] {});
    if (record.error.empty()) {
      std::fprintf(progress, "%6.2f GB/s median, %6.2f p99 (%.1f s)\n", record.gbps_median, record.gbps_p99,
                   elapsed());
    } else {
      std::fprintf(progress, "FAILED: %s\n", record.error.c_str());
    }
    std::fflush(progress);
    g.records.push_back(std::move(record));
  }
  attach_gpu_limits(&report);
}

}  // namespace

BenchReport run_sweep(const SweepConfig& config, std::FILE* progress) {
  BenchReport report;
  report.started_at = now_iso8601();
  const auto started = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  report.host = host;
  Baselines& b = report.baselines;

  // The raw TCP stream and ucx_perftest are measured next to the rows that
  // are compared with them (three times each, see below) and enter the
  // baselines from there; memcpy, iperf3 and the checkpoint file here.
  std::set<std::uint64_t> sizes(config.memcpy_sizes.begin(), config.memcpy_sizes.end());
  if (sizes.empty()) {
    for (const CellSpec& cell : config.cells) sizes.insert(cell.size);
  }
  std::fprintf(progress, "Limits of this machine (median of %d unless said):\n", config.repetitions);
  for (std::uint64_t size : sizes) {
    b.memcpy_1t[size] = measure_memcpy(size, 1, reps_at(config, size));
    report_baseline(progress, "memcpy, 1 thread", size, b.memcpy_1t[size]);
    b.memcpy_2t[size] = measure_memcpy(size, 2, reps_at(config, size));
    report_baseline(progress, "memcpy, 2 threads", size, b.memcpy_2t[size]);
  }
  if (config.remote.empty() && config.iperf3_seconds > 0) {
    b.iperf3 = measure_iperf3(config.iperf3_seconds);
    report_baseline(progress, "iperf3, one stream", 0, b.iperf3);
  }
  std::set<std::uint64_t> checkpoint_sizes(config.checkpoint_sizes.begin(), config.checkpoint_sizes.end());
  checkpoint_sizes.insert(config.checkpoint_fsync_sizes.begin(), config.checkpoint_fsync_sizes.end());
  for (std::uint64_t size : checkpoint_sizes) {
    const bool fsync =
        std::count(config.checkpoint_fsync_sizes.begin(), config.checkpoint_fsync_sizes.end(), size);
    // --reps, not the 2.5 GB floor: file round trips are slow and steady.
    const int reps = size >= (256ull << 20) ? std::min(config.repetitions, 3) : config.repetitions;
    auto file = measure_checkpoint_file(size, config.checkpoint_dir, reps, fsync);
    b.file[size] = file.page_cache;
    report_baseline(progress, "checkpoint file, page cache", size, b.file[size]);
    if (fsync) {
      b.file_fsync[size] = file.forced_to_disk;
      report_baseline(progress, "checkpoint file, fsync + disk read", size, b.file_fsync[size]);
    }
  }

  std::unique_ptr<wsutil::LineStream> remote;
  if (!config.remote.empty()) remote = std::make_unique<wsutil::LineStream>(connect_control(config.remote));

  std::fprintf(progress, "(baselines took %.1f s)\n", elapsed());
  std::fprintf(progress,
               "Cells (%zu), %d warm-up + at least %d measured pulls each (%.1f GB worth, up to 200), %d "
               "with the compute loop:\n",
               config.cells.size(), std::max(config.warmup, 3), config.repetitions, config.min_gb_per_cell,
               config.compute_rounds);
  std::size_t index = 0;
  for (const CellSpec& spec : config.cells) {
    ++index;
    const std::string name = spec.transport.transport +
                             (spec.transport.detail.empty() ? "" : " " + spec.transport.detail) + " " +
                             format_size(spec.size) + " x" + std::to_string(spec.readers);
    std::fprintf(progress, "  [%zu/%zu] %-36s ", index, config.cells.size(), name.c_str());
    std::fflush(progress);
    std::string limit_name;
    std::vector<BaselineFigure> limits;
    auto measure = [&] {
      if (auto f = measure_limit(config, spec, &limit_name)) limits.push_back(*f);
    };
    measure();
    CellRecord record = run_cell(config, spec, remote.get(), measure);
    measure();
    if (record.error.empty() && limits.size() == 3) attach_limit(record, limit_name, limits);
    if (record.error.empty() && spec.transport.transport == "shm") {
      record.limit_name = "memcpy paired";
      record.limit_gbps = record.memcpy_paired_gbps;
      record.ratio_to_limit = record.gbps_median / record.limit_gbps;
    }
    if (record.error.empty() && b.memcpy_1t.count(spec.size) == 0) {
      BaselineFigure paired;
      paired.gbps = record.memcpy_paired_gbps;
      paired.repetitions = record.repetitions;
      paired.note = "the paired memcpy in the " + name + " reader";
      b.memcpy_1t[spec.size] = paired;
    }
    if (limits.size() >= 2) {
      // The halfway measurement stands for the run's baseline at this size.
      const std::string& t = spec.transport.transport;
      if (t == "tcp") b.tcp_raw.emplace(spec.size, limits[1]);
      if (t == "ucx") b.ucx_perftest[spec.transport.detail].emplace(spec.size, limits[1]);
    }
    if (record.error.empty()) {
      std::fprintf(progress, "%6.2f GB/s median, %6.2f p99; %s %.2f GB/s: %.0f%% (%.1f s)\n",
                   record.gbps_median, record.gbps_p99,
                   record.limit_name.empty() ? "no limit" : record.limit_name.c_str(), record.limit_gbps,
                   record.ratio_to_limit * 100.0, elapsed());
    } else {
      std::fprintf(progress, "FAILED: %s\n", record.error.c_str());
    }
    std::fflush(progress);
    report.records.push_back(std::move(record));
  }
  run_gpu_rows(config, report, progress, elapsed);
  if (remote) remote->write_line("QUIT");
  return report;
}

}  // namespace wsbench
