// weightsync-crowd-bench: /proc sampling, limits, statistics and the content pattern.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "crowd_common.h"

namespace crowd {

namespace {
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kStep = 0x0101010101010101ull;
}  // namespace

ProcSample sample_process(pid_t pid) {
  ProcSample s;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) s.threads = std::stol(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kib = std::stol(line.substr(6));  // "  1234 kB"
  }
  return s;
}

std::size_t raise_nofile(std::size_t at_least) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= at_least) return lim.rlim_cur;
  rlimit want = lim;
  want.rlim_cur = at_least;
  if (want.rlim_max != RLIM_INFINITY && want.rlim_max < at_least) want.rlim_max = at_least;  // root only
  if (::setrlimit(RLIMIT_NOFILE, &want) != 0) {
    want.rlim_max = lim.rlim_max;  // not root: as far as the hard limit allows
    want.rlim_cur = lim.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &want);
  }
  (void)::getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void fill_pattern(void* data, std::size_t bytes, std::uint64_t version) {
  auto* words = static_cast<std::uint64_t*>(data);
  const std::uint64_t base = version * kGolden;
  const std::size_t n = bytes / 8;
  for (std::size_t k = 0; k < n; ++k) words[k] = base + k * kStep;
}

std::size_t check_pattern(const void* data, std::size_t bytes, std::uint64_t version,
                          std::size_t stride_words) {
  const auto* words = static_cast<const std::uint64_t*>(data);
  const std::uint64_t base = version * kGolden;
  const std::size_t n = bytes / 8;
  if (stride_words == 0) stride_words = 1;
  std::size_t bad = 0;
  for (std::size_t k = 0; k < n; k += stride_words) bad += words[k] != base + k * kStep ? 1 : 0;
  if (n > 0 && words[n - 1] != base + (n - 1) * kStep) ++bad;  // the last word always
  return bad;
}

PublisherProcess start_publisher(const Config& cfg, const std::string& self, const std::string& profile,
                                 const std::string& log) {
  std::vector<std::string> argv{self,
                                "--role",
                                "publisher",
                                "--profile",
                                profile,
                                "--bytes",
                                std::to_string(cfg.bytes),
                                "--interval-ms",
                                std::to_string(cfg.interval_ms),
                                "--max-connections",
                                std::to_string(cfg.max_connections),
                                "--io-timeout-ms",
                                std::to_string(cfg.io_timeout_ms),
                                "--nofile",
                                std::to_string(cfg.nofile),
                                "--publisher-log",
                                log};
  PublisherProcess p;
  p.child = std::make_unique<wsutil::ChildProcess>(
      wsutil::ChildProcess::spawn(argv, {"WEIGHTSYNC_SECRET=" + cfg.secret}));
  auto address = p.child->wait_for("ADDRESS ", std::chrono::seconds(60));
  if (!address) throw std::runtime_error("the publisher did not print its address within 60 s; see " + log);
  p.address = *address;
  return p;
}

std::string PublisherProcess::stop() {
  if (!child) return "";
  child->close_stdin();
  std::string stats;
  const double until = now_seconds() + 60;
  while (now_seconds() < until) {
    auto line = child->read_line(std::chrono::seconds(5));
    if (!line) break;
    if (line->rfind("STATS ", 0) == 0) {
      stats = line->substr(6);
      break;
    }
  }
  if (!child->wait(std::chrono::seconds(60))) child->signal(9);
  child.reset();
  return stats;
}

}  // namespace crowd
