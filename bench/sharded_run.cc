// run_sharded(): per transport, starts the publishers (R trainer ranks and one
// whole-model publisher) and the readers of every row, then runs the rows
// interleaved (warm-up iterations first), each run: the row's publishers
// publish their next version, then the coordinator takes the clock, signals
// the row's readers and waits for every one to report; the run lasts from
// that clock to the last reader's completion (sharded.h, docs/perf/sharded.md).
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "child_process.h"
#include "machine.h"
#include "sharded_report.h"

namespace wsbench {
namespace {

using std::chrono::seconds;

struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Proc {
  wsutil::ChildProcess process;
  std::string name;
  std::uint64_t version = 0;  // publishers: the last version published
};

// The rest of the line after `prefix`; throws with the role's error or silence.
std::string expect(Proc& p, const std::string& prefix, std::chrono::seconds timeout) {
  auto line = p.process.read_line(timeout);
  if (!line) {
    throw RunError(p.name + ": no answer within " + std::to_string(timeout.count()) + " s (exited or hung)");
  }
  if (line->rfind("ERROR ", 0) == 0) throw RunError(p.name + ": " + line->substr(6));
  if (line->rfind(prefix, 0) != 0)
    throw RunError(p.name + ": expected " + prefix + "..., got '" + *line + "'");
  return line->substr(prefix.size());
}

std::vector<double> parse_list(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty() && item != "-") out.push_back(std::stod(item));
  }
  return out;
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  in >> a >> b >> c;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", a, b, c);
  return buf;
}

// CPU accounting, to tell how much of the machine something else used while
// a transport was measured: the machine's user+nice+system ticks minus those
// of this process and its children and of the kernel's threads (interrupt
// and softirq time, which loopback TCP spends on behalf of the bench, is
// left out of both), and steal.
struct CpuTicks {
  double busy = 0, steal = 0, ours = 0, kernel = 0;
  bool ok = false;
};

// utime + stime of a process (all its threads), and its parent's pid.
double process_ticks(pid_t pid, long* ppid = nullptr) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  // Fields after the name: state(3) ppid(4) ... utime(14) stime(15).
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 4 && ppid != nullptr) *ppid = std::stol(f);
    if (i == 14) utime = std::stod(f);
    if (i == 15) stime = std::stod(f);
  }
  return utime + stime;
}

// Ticks of the kernel's threads (kthreadd and its children: ksoftirqd, which
// runs much of loopback TCP's receive path, kworkers, ...).
double kernel_thread_ticks() {
  double total = 0;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return 0;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    long ppid = -1;
    const double ticks = process_ticks(static_cast<pid_t>(pid), &ppid);
    if (pid == 2 || ppid == 2) total += ticks;
  }
  ::closedir(dir);
  return total;
}

CpuTicks cpu_ticks(const std::vector<pid_t>& ours) {
  CpuTicks t;
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu")
    return t;
  t.busy = user + nice + system;
  t.steal = steal;
  t.ours = process_ticks(::getpid());
  for (pid_t p : ours) t.ours += process_ticks(p);
  t.kernel = kernel_thread_ticks();
  t.ok = true;
  return t;
}

struct Row {
  ShardedRow result;
  std::vector<std::size_t> publishers;  // indices into the publisher list
  std::vector<std::size_t> readers;     // indices into the reader list
};

ShardedTransportResult measure_transport(const ShardedConfig& config, const std::string& transport) {
  ShardedTransportResult out;
  out.transport = transport;
  const auto started = std::chrono::steady_clock::now();
  const std::vector<std::string> env = {"WEIGHTSYNC_LOG_LEVEL=error"};
  const std::string model = config.model.encode();
  const int R = config.ranks, T = config.readers;
  std::vector<Proc> publishers, readers;
  try {
    // Publishers: R trainer ranks, then the whole model (index R).
    for (int r = 0; r <= R; ++r) {
      const bool whole = r == R;
      std::vector<std::string> argv = {
          config.self_exe, "sharded-publisher",           "--model", model,
          "--ranks",       std::to_string(whole ? 1 : R), "--rank",  std::to_string(whole ? 0 : r)};
      if (config.checksum) argv.push_back("--checksum");
      publishers.push_back(Proc{wsutil::ChildProcess::spawn(argv, env),
                                whole ? "whole-model publisher" : "publisher rank " + std::to_string(r)});
    }
    std::vector<std::string> addresses;
    for (auto& p : publishers) {
      std::istringstream ready(expect(p, "READY ", seconds(120)));
      std::string address;
      ready >> address;
      addresses.push_back(address);
    }
    std::string sharded_addresses;
    for (int r = 0; r < R; ++r) sharded_addresses += (r ? "," : "") + addresses[static_cast<std::size_t>(r)];
    const std::string& whole_address = addresses.back();

    std::vector<Row> rows;
    auto add_reader = [&](Row& row, const std::string& name, std::vector<std::string> argv) {
      argv.insert(argv.begin(), {config.self_exe, "sharded-reader", "--model", model, "--transport",
                                 transport, "--verify", config.verify});
      row.readers.push_back(readers.size());
      readers.push_back(Proc{wsutil::ChildProcess::spawn(argv, env), name});
    };
    {
      Row row;
      row.result.name = "sharded";
      row.result.label = std::to_string(R) + "x" + std::to_string(T);
      row.result.publishers = R;
      row.result.readers = T;
      for (int r = 0; r < R; ++r) row.publishers.push_back(static_cast<std::size_t>(r));
      for (int g = 0; g < T; ++g) {
        add_reader(row, row.result.label + " reader " + std::to_string(g),
                   {"--ranks", std::to_string(R), "--readers", std::to_string(T), "--rank", std::to_string(g),
                    "--addresses", sharded_addresses});
      }
      rows.push_back(std::move(row));
    }
    {
      Row row;
      row.result.name = "single";
      row.result.label = "1x1";
      row.result.publishers = 1;
      row.result.readers = 1;
      row.publishers.push_back(static_cast<std::size_t>(R));
      add_reader(row, "single reader", {"--single", "--addresses", whole_address});
      rows.push_back(std::move(row));
    }
    if (config.tp1 && T > 1 && R > 1) {  // with R = 1 the sharded row is this row
      Row row;
      row.result.name = "tp1";
      row.result.label = "1x" + std::to_string(T);
      row.result.publishers = 1;
      row.result.readers = T;
      row.publishers.push_back(static_cast<std::size_t>(R));
      for (int g = 0; g < T; ++g) {
        add_reader(row, row.result.label + " reader " + std::to_string(g),
                   {"--ranks", "1", "--readers", std::to_string(T), "--rank", std::to_string(g),
                    "--addresses", whole_address});
      }
      rows.push_back(std::move(row));
    }
    for (Row& row : rows) {
      for (std::size_t i : row.readers) {
        std::istringstream ready(expect(readers[i], "READY ", seconds(120)));
        std::string got_transport, pieces;
        std::uint64_t bytes = 0;
        ready >> got_transport >> bytes >> pieces;
        if (got_transport != transport) {
          throw RunError(readers[i].name + " connected over " + got_transport + ", not " + transport);
        }
        row.result.bytes += bytes;
        row.result.pieces.push_back(pieces);
      }
      if (row.result.bytes != config.model.total_bytes) {
        throw RunError(row.result.label + " row: its readers hold " + std::to_string(row.result.bytes) +
                       " bytes, not the model's " + std::to_string(config.model.total_bytes));
      }
    }

    std::vector<pid_t> pids;
    for (auto& p : publishers) pids.push_back(p.process.pid());
    for (auto& p : readers) pids.push_back(p.process.pid());
    CpuTicks before;
    auto before_at = std::chrono::steady_clock::now();
    const auto timeout = seconds(120);
    const int iterations = config.warmup + config.runs;
    std::vector<std::size_t> order(rows.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (int it = 0; it < iterations; ++it) {
      const bool measured = it >= config.warmup;
      if (it == config.warmup) {
        before = cpu_ticks(pids);
        before_at = std::chrono::steady_clock::now();
      }
      // A B C, then C B A: each row goes first and last equally often.
      std::vector<std::size_t> this_order = order;
      if (it % 2 == 1) std::reverse(this_order.begin(), this_order.end());
      std::string progress;
      for (std::size_t k : this_order) {
        Row& row = rows[k];
        // 1. Every publisher of the row commits its next version (they fill at once).
        std::uint64_t version = 0;
        for (std::size_t p : row.publishers) {
          version = ++publishers[p].version;
          publishers[p].process.write_line("PUBLISH " + std::to_string(version));
        }
        for (std::size_t p : row.publishers) {
          std::istringstream committed(expect(publishers[p], "COMMITTED ", timeout));
          std::uint64_t v = 0;
          committed >> v;
          if (v != version) throw RunError(publishers[p].name + " committed " + std::to_string(v));
        }
        // 2. The start signal, then every reader's report.
        const std::int64_t start_ns = monotonic_ns();
        for (std::size_t i : row.readers) readers[i].process.write_line("PULL " + std::to_string(version));
        ShardedSample sample;
        sample.run = it - config.warmup + 1;
        sample.checksums_verified = true;
        std::int64_t last_ns = start_ns;
        for (std::size_t i : row.readers) {
          std::istringstream held(expect(readers[i], "HELD ", timeout));
          std::uint64_t got = 0, bytes = 0, checked = 0;
          double pull_s = 0, cpu_s = 0;
          std::int64_t end_ns = 0;
          int checksums = 0;
          std::string members;
          held >> got >> pull_s >> end_ns >> bytes >> checked >> cpu_s >> checksums >> members;
          if (got != version) {
            throw RunError(readers[i].name + " delivered version " + std::to_string(got) + ", not " +
                           std::to_string(version));
          }
          last_ns = std::max(last_ns, end_ns);
          sample.reader_pull_s.push_back(pull_s);
          sample.member_s.push_back(parse_list(members));
          sample.reader_cpu_s += cpu_s;
          sample.checked_bytes += checked;
          sample.checksums_verified = sample.checksums_verified && checksums == 1;
        }
        sample.seconds = static_cast<double>(last_ns - start_ns) * 1e-9;
        sample.gbps = static_cast<double>(row.result.bytes) / sample.seconds / 1e9;
        char buf[96];
        std::snprintf(buf, sizeof(buf), "%s%s %.4f s %.2f GB/s", progress.empty() ? "" : " | ",
                      row.result.label.c_str(), sample.seconds, sample.gbps);
        progress += buf;
        if (measured) row.result.samples.push_back(std::move(sample));
      }
      std::printf("  %s %s %d/%d: %s\n", transport.c_str(), measured ? "run" : "warm-up",
                  measured ? it - config.warmup + 1 : it + 1, measured ? config.runs : config.warmup,
                  progress.c_str());
      std::fflush(stdout);
    }
    const CpuTicks after = cpu_ticks(pids);
    const auto after_at = std::chrono::steady_clock::now();
    out.wall_s = std::chrono::duration<double>(after_at - started).count();
    const double window_s = std::chrono::duration<double>(after_at - before_at).count();
    if (before.ok && after.ok && window_s > 0) {
      // Over the measured iterations (publishing and checking included).
      const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
      const double kernel = after.kernel - before.kernel;
      out.kernel_thread_cores = kernel / hz / window_s;
      out.other_cpu_cores =
          std::max(0.0, (after.busy - before.busy) - (after.ours - before.ours) - kernel) / hz / window_s;
      out.steal_cores = (after.steal - before.steal) / hz / window_s;
    }
    for (Row& row : rows) {
      row.result.summarize();
      out.rows.push_back(std::move(row.result));
    }
    for (auto& p : publishers) p.process.write_line("QUIT");
    for (auto& p : readers) p.process.write_line("QUIT");
  } catch (const std::exception& e) {
    out.error = e.what();
    out.verdict = "ERROR";
  }
  return out;
}

}  // namespace

void ShardedRow::summarize() {
  std::vector<double> s, g, pull, cpu;
  for (const auto& x : samples) {
    s.push_back(x.seconds);
    g.push_back(x.gbps);
    pull.push_back(*std::max_element(x.reader_pull_s.begin(), x.reader_pull_s.end()));
    cpu.push_back(x.reader_cpu_s);
  }
  if (s.empty()) return;
  std::vector<double> sorted = s;
  std::sort(sorted.begin(), sorted.end());
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
  };
  seconds_median = median(s);
  gbps_median = median(g);
  seconds_min = sorted.front();
  seconds_max = sorted.back();
  reader_pull_s_median = median(pull);
  reader_cpu_s_median = median(cpu);
}

int run_sharded(const ShardedConfig& config) {
  ShardedReport report;
  report.config = config;
  report.command_line = config.command_line;
  report.started_at = now_iso8601();
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  report.host = host;
  report.machine = describe_machine(MemoryShown::kYes);
  report.loadavg_start = loadavg();
  const auto started = std::chrono::steady_clock::now();
  std::printf(
      "weightsync-bench sharded: %d publishers x %d readers beside 1 x 1, %.0f MiB (%d float32 matrices of "
      "%lld columns), %d warm-up + %d measured runs per row, interleaved; checksums %s, verify %s\n",
      config.ranks, config.readers, static_cast<double>(config.model.total_bytes) / (1 << 20),
      config.model.matrices, static_cast<long long>(config.model.width), config.warmup, config.runs,
      config.checksum ? "on" : "off", config.verify.c_str());
  std::printf("machine: %s; load average %s\n", report.machine.c_str(), report.loadavg_start.c_str());
  std::fflush(stdout);
  int failed = 0;
  for (const auto& transport : config.transports) {
    std::printf("%s:\n", transport.c_str());
    std::fflush(stdout);
    ShardedTransportResult result = measure_transport(config, transport);
    if (result.error.empty()) {
      const ShardedRow& sharded = result.rows[0];
      const ShardedRow& single = result.rows[1];
      result.ratio = sharded.gbps_median / single.gbps_median;
      std::vector<double> paired;
      for (std::size_t i = 0; i < sharded.samples.size() && i < single.samples.size(); ++i) {
        paired.push_back(sharded.samples[i].gbps / single.samples[i].gbps);
      }
      std::sort(paired.begin(), paired.end());
      const std::size_t n = paired.size();
      result.paired_ratio = n == 0 ? 0 : n % 2 ? paired[n / 2] : (paired[n / 2 - 1] + paired[n / 2]) / 2.0;
      result.verdict = result.ratio >= config.target ? "PASS" : "MISS";
    } else {
      std::printf("  FAILED: %s\n", result.error.c_str());
      ++failed;
    }
    report.transports.push_back(std::move(result));
  }
  report.loadavg_end = loadavg();
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("\n");
  print_sharded_table(stdout, report);
  int rc = failed > 0 ? 1 : 0;
  if (!config.json.empty()) {
    std::string error;
    if (!write_sharded_json(config.json, report, &error)) {
      std::fprintf(stderr, "weightsync-bench sharded: %s\n", error.c_str());
      rc = 1;
    } else {
      std::printf("wrote %s\n", config.json.c_str());
    }
  }
  return rc;
}

}  // namespace wsbench
