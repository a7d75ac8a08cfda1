// run_pause(): per size a Publisher and its trainer thread, per transport the
// baselines and the three rows, each row on the engine's thread: read passes
// with the row's update step between them (pause_bench.h, pause_engine.h).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <utility>

#include "pause_engine.h"
#include "report.h"
#include "roles.h"
#include "stats.h"

namespace wsbench {
namespace {

using Clock = std::chrono::steady_clock;
const char* const kSecret = "weightsync-bench-pause";

// Where every pass's sum goes, so the compiler keeps the reads.
std::atomic<std::uint64_t> g_read_sink{0};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// CPU ticks: the machine's busy ones (user, nice, system), its steal, and this process's.
struct CpuTicks {
  double busy = 0, steal = 0, self = 0;
  double all = 0;  // busy + irq + softirq: everything the machine did (loopback tcp's softirqs too)
  Clock::time_point at = Clock::now();
};

CpuTicks cpu_ticks() {
  CpuTicks t;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  t.busy = user + nice + system;
  t.all = t.busy + irq + softirq;
  t.steal = steal;
  std::ifstream self("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  t.self = utime + stime;
  return t;
}

// User and system CPU of every thread of this process so far, in seconds
// (getrusage: microseconds, where /proc's ticks are 10 ms).
double process_cpu_seconds() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Cores used by other processes (and kernel threads' system time), and steal, since `start`.
void other_cpu(const CpuTicks& start, PauseGroup* group) {
  const CpuTicks end = cpu_ticks();
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double wall = std::chrono::duration<double>(end.at - start.at).count();
  if (wall <= 0 || hz <= 0) return;
  group->other_cores = std::max(0.0, (end.busy - start.busy) - (end.self - start.self)) / hz / wall;
  group->steal_cores = (end.steal - start.steal) / hz / wall;
}

// A HostBuffer with every page written (no first-touch faults in a timing).
weightsync::HostBuffer faulted_buffer(std::uint64_t bytes, int fill) {
  auto buffer = weightsync::HostBuffer::allocate(bytes);
  if (!buffer.ok()) throw PauseError("allocating " + format_size(bytes) + ": " + buffer.status().to_string());
  std::memset(buffer->data(), fill, buffer->size());
  return std::move(*buffer);
}

// The memcpy baseline: between two pre-faulted HostBuffers (the kind the
// staging and live buffers are), one warm-up, then `reps` timed copies.
std::vector<double> memcpy_seconds(std::uint64_t bytes, int reps) {
  weightsync::HostBuffer src = faulted_buffer(bytes, 0x5a), dst = faulted_buffer(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    seconds.push_back(seconds_since(start));
  }
  g_read_sink += static_cast<const unsigned char*>(dst.data())[bytes / 2];
  return seconds;
}

// The engine reading with no update running: at least `idle_passes` passes and `idle_seconds`.
struct IdleWindow {
  std::uint64_t bytes = 0, passes = 0;
  double seconds = 0;
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0.0; }
};

IdleWindow idle_reader(const weightsync::HostBuffer& live, const PauseConfig& config) {
  read_pass(live.data(), live.size());  // warm-up
  const auto start = Clock::now();
  IdleWindow w;
  while (w.passes < static_cast<std::uint64_t>(config.idle_passes) ||
         seconds_since(start) < config.idle_seconds) {
    g_read_sink += read_pass(live.data(), live.size());
    ++w.passes;
  }
  w.seconds = seconds_since(start);
  w.bytes = w.passes * live.size();
  return w;
}

// The baselines, taken before and after the rows (drift shows as a
// difference between the two): the memcpy's median over both sets, the
// reader's rate over both windows.
void set_baselines(const std::vector<double>& memcpy_before, const std::vector<double>& memcpy_after,
                   const IdleWindow& idle_before, const IdleWindow& idle_after, PauseGroup* group) {
  std::vector<double> all = memcpy_before;
  all.insert(all.end(), memcpy_after.begin(), memcpy_after.end());
  group->memcpy_median_s = median(all);
  group->memcpy_before_s = median(memcpy_before);
  group->memcpy_after_s = median(memcpy_after);
  group->memcpy_gbps = static_cast<double>(group->size_bytes) / 1e9 / group->memcpy_median_s;
  group->memcpy_reps = static_cast<int>(all.size());
  group->reader_idle_gbps = static_cast<double>(idle_before.bytes + idle_after.bytes) / 1e9 /
                            (idle_before.seconds + idle_after.seconds);
  group->reader_idle_before_gbps = idle_before.gbps();
  group->reader_idle_after_gbps = idle_after.gbps();
  group->reader_idle_passes = idle_before.passes + idle_after.passes;
}

// One row: warm-up updates, then `reps` measured ones; the engine reads a
// whole pass between two looks for an update.
PauseRow run_row(const std::string& name, Updater& updater, PauseTrainer& trainer, std::uint64_t bytes,
                 const PauseConfig& config) {
  PauseRow row;
  row.name = name;
  const int total = config.warmup + config.reps;
  Clock::time_point window_start = Clock::now(), window_end = window_start;
  double cpu_start = process_cpu_seconds(), cpu_end = cpu_start;
  CpuTicks ticks_start = cpu_ticks(), ticks_end = ticks_start;
  try {
    for (int u = 0; u < total; ++u) {
      const bool measured = u >= config.warmup;
      if (u == config.warmup) {
        window_start = Clock::now();
        cpu_start = process_cpu_seconds();
        ticks_start = cpu_ticks();
      }
      const auto deadline = Clock::now() + std::chrono::seconds(config.timeout_s);
      PauseSample sample;
      for (;;) {
        if (const void* live = updater.live(); live != nullptr) {
          g_read_sink += read_pass(live, bytes);
          if (measured) {
            row.reader_bytes += bytes;
            ++row.reader_passes;
          }
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(200));  // no weights yet
        }
        if (updater.try_update(&sample)) break;
        if (std::string why = trainer.error(); !why.empty()) throw PauseError(why);
        if (Clock::now() > deadline) {
          throw PauseError("no update within " + std::to_string(config.timeout_s) + " s (update " +
                           std::to_string(u + 1) + " of " + std::to_string(total) + ")");
        }
      }
      window_end = Clock::now();
      cpu_end = process_cpu_seconds();
      ticks_end = cpu_ticks();
      sample.marks_ok = image_has_marks(updater.live(), bytes, sample.version);
      if (measured) row.samples.push_back(sample);
      if (u + 1 < total) trainer.publish_next();
    }
  } catch (const PauseError& e) {
    row.error = e.what();
  }
  row.window_s = std::chrono::duration<double>(window_end - window_start).count();
  row.process_cpu_s = cpu_end - cpu_start;
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  row.machine_cpu_s = hz > 0 ? (ticks_end.all - ticks_start.all) / hz : kNaN;
  row.summarize();
  return row;
}

std::unique_ptr<weightsync::Subscriber> connect(const std::string& address, const std::string& transport) {
  weightsync::SubscriberOptions options;
  options.secret = kSecret;
  options.transport = transport;
  options.io_timeout_ms = 60000;
  options.client_name = "weightsync-bench pause";
  auto subscriber = weightsync::Subscriber::connect(address, options);
  if (!subscriber.ok())
    throw PauseError("connect over " + transport + ": " + subscriber.status().to_string());
  if ((*subscriber)->transport() != transport) {
    throw PauseError("asked for " + transport + ", got " + (*subscriber)->transport());
  }
  return std::move(*subscriber);
}

// 0.3 us, 25.96 ms.
std::string pause_text(double seconds) {
  char buf[32];
  if (seconds < 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.1f us", seconds * 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f ms", seconds * 1e3);
  }
  return buf;
}

void progress_row(const PauseGroup& group, const PauseRow& row) {
  if (!row.error.empty()) {
    std::fprintf(stderr, "pause: %s %s %s: FAILED: %s\n", group.transport.c_str(),
                 format_size(group.size_bytes).c_str(), row.name.c_str(), row.error.c_str());
    return;
  }
  std::fprintf(
      stderr, "pause: %s %s %s: %zu updates, blocked median %s (call %s), pull %.2f GB/s, reader %.2f GB/s\n",
      group.transport.c_str(), format_size(group.size_bytes).c_str(), row.name.c_str(), row.samples.size(),
      pause_text(row.blocked_median_s).c_str(), pause_text(row.call_median_s).c_str(), row.pull_gbps_median,
      row.reader_gbps);
}

// One row, its updater made by `make` (a failure to make it is the row's error).
template <typename Make>
void add_row(PauseGroup* group, const std::string& name, PauseTrainer& trainer, const PauseConfig& config,
             Make make) {
  std::fprintf(stderr, "pause: %s %s %s ...\n", group->transport.c_str(),
               format_size(group->size_bytes).c_str(), name.c_str());
  PauseRow row;
  try {
    std::unique_ptr<Updater> updater = make();
    row = run_row(name, *updater, trainer, group->size_bytes, config);
  } catch (const PauseError& e) {
    row.name = name;
    row.error = e.what();
    row.summarize();
  }
  progress_row(*group, row);
  group->rows.push_back(std::move(row));
}

// The baselines, then foreground, swap and copy over one transport.
PauseGroup run_group(const std::string& address, PauseTrainer& trainer, const std::string& transport,
                     std::uint64_t bytes, const PauseConfig& config) {
  PauseGroup group;
  group.transport = transport;
  group.size_bytes = bytes;
  const CpuTicks start = cpu_ticks();
  try {
    const std::vector<double> memcpy_before = memcpy_seconds(bytes, config.memcpy_reps);
    weightsync::HostBuffer live = faulted_buffer(bytes, 0);
    const IdleWindow idle_before = idle_reader(live, config);
    std::fprintf(stderr, "pause: %s %s baselines before: memcpy %.2f GB/s, reader alone %.2f GB/s\n",
                 transport.c_str(), format_size(bytes).c_str(),
                 static_cast<double>(bytes) / 1e9 / median(memcpy_before), idle_before.gbps());
    const auto timeout = std::chrono::seconds(config.timeout_s);
    add_row(&group, "foreground", trainer, config,
            [&] { return make_foreground_updater(connect(address, transport), live, trainer, timeout); });
    add_row(&group, "swap", trainer, config, [&] {
      return make_staged_updater(connect(address, transport), weightsync::InstallMode::kSwap, nullptr,
                                 config.checksum);
    });
    add_row(&group, "copy", trainer, config, [&] {
      return make_staged_updater(connect(address, transport), weightsync::InstallMode::kCopy, &live,
                                 config.checksum);
    });
    const IdleWindow idle_after = idle_reader(live, config);
    const std::vector<double> memcpy_after = memcpy_seconds(bytes, config.memcpy_reps);
    set_baselines(memcpy_before, memcpy_after, idle_before, idle_after, &group);
    std::fprintf(stderr, "pause: %s %s baselines after: memcpy %.2f GB/s, reader alone %.2f GB/s\n",
                 transport.c_str(), format_size(bytes).c_str(),
                 static_cast<double>(bytes) / 1e9 / median(memcpy_after), idle_after.gbps());
  } catch (const PauseError& e) {
    group.error = e.what();
  }
  other_cpu(start, &group);
  return group;
}

std::string transport_problem(const std::string& name) {
  for (const auto& t : weightsync::available_transports()) {
    if (t.name != name) continue;
    return t.viable ? "" : "not viable here: " + t.reason;
  }
  return "not built into this library";
}

// Every transport at one size, over one Publisher and its trainer.
void run_size(std::uint64_t bytes, const PauseConfig& config, PauseReport* report) {
  std::vector<PauseGroup> groups;
  auto layout = weightsync::WeightLayout::build(
      {weightsync::TensorSpec{"image", weightsync::DType::kUInt8, {static_cast<std::int64_t>(bytes)}}});
  std::string failed = layout.ok() ? "" : "layout: " + layout.status().to_string();
  std::unique_ptr<weightsync::Publisher> publisher;
  if (failed.empty()) {
    weightsync::PublisherOptions options;
    options.bind_address = "127.0.0.1";
    options.secret = kSecret;
    options.slots = 3;
    options.checksum = config.checksum;
    options.deltas = false;
    options.io_timeout_ms = 60000;
    auto created = weightsync::Publisher::create(std::move(*layout), options);
    if (created.ok()) publisher = std::move(*created);
    if (!created.ok()) failed = "Publisher::create: " + created.status().to_string();
  }
  std::unique_ptr<PauseTrainer> trainer;
  if (failed.empty()) {
    trainer = std::make_unique<PauseTrainer>(*publisher, std::chrono::milliseconds(config.interval_ms));
    if (auto s = trainer->fill_slots(); !s.ok()) failed = "filling the slots: " + s.to_string();
  }
  for (const std::string& transport : config.transports) {
    const std::string problem = failed.empty() ? transport_problem(transport) : failed;
    if (!problem.empty()) {
      PauseGroup group;
      group.transport = transport;
      group.size_bytes = bytes;
      (failed.empty() ? group.skipped : group.error) = problem;
      std::fprintf(stderr, "pause: %s %s: skipped: %s\n", transport.c_str(), format_size(bytes).c_str(),
                   problem.c_str());
      report->groups.push_back(std::move(group));
      continue;
    }
    report->groups.push_back(run_group(publisher->address(), *trainer, transport, bytes, config));
  }
  trainer.reset();  // before the publisher it publishes into
}

}  // namespace

PauseReport run_pause(const PauseConfig& config) {
  PauseReport report;
  report.config = config;
  report.started_at = now_iso8601();
  report.loadavg_start = loadavg();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  report.host = host;
  const auto start = Clock::now();
  for (std::uint64_t bytes : config.sizes) {
    try {
      run_size(bytes, config, &report);
    } catch (const std::exception& e) {
      PauseGroup group;
      group.size_bytes = bytes;
      group.error = e.what();
      report.groups.push_back(std::move(group));
    }
  }
  report.wall_s = seconds_since(start);
  report.loadavg_end = loadavg();
  return report;
}

}  // namespace wsbench
