// weightsync-crowd-bench: main(), the options, the table and the JSON file.
// See crowd_common.h for what it measures; `--help` for the options.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "crowd_common.h"
#include "weightsync/weightsync.h"

namespace {

using crowd::Config;

const char* kHelp = R"HELP(weightsync-crowd-bench: what open connections cost a publisher, and whether a flood
of unauthenticated connections locks good subscribers out. Loopback (127.0.0.1) only.

Usage: weightsync-crowd-bench [options]

Scenarios:
  --scenario LIST          comma-separated: crowd, flood (default crowd,flood)
  crowd: a publisher (max_connections --max-connections) serves --pullers threads that pull the
         newest version back to back for --duration-s, --runs times; then --idle-sessions
         authenticated tcp subscribers connect and never pull; the publisher's threads and RSS
         are read 1 s later; then the pullers run --runs times again with those sessions open.
  flood: a publisher with default options but the secret and io_timeout_ms (--io-timeout-ms);
         --baseline-tries good tries alone, then an attacker holds --attackers connections that
         never authenticate (1/3 silent, 1/3 7 bytes of a header, 1/3 a whole HELLO then
         silence), reopening each as soon as it is closed, while a good subscriber
         (connect_timeout_ms --connect-timeout-ms, tcp) connects and pulls one version,
         checked word by word, --tries times (stopping after --flood-budget-s).

Options:
  --bytes N                bytes per version, one tensor (default 67108864 = 64 MiB; multiple of 8)
  --interval-ms N          the publisher commits a new version this often (default 200)
  --transports LIST        crowd pullers' transports, comma-separated: tcp, shm (default tcp)
  --duration-s N           crowd: seconds per pulling run (default 10)
  --pullers N              crowd: puller threads (default 16)
  --idle-sessions N        crowd: idle authenticated sessions (default 1000)
  --runs N                 crowd: runs per phase; the table shows medians (default 3)
  --max-connections N      crowd: PublisherOptions::max_connections (default 4096)
  --attackers N            flood: attacker connections (default 1000)
  --tries N                flood: good subscriber tries under attack (default 20)
  --baseline-tries N       flood: good tries before the attack (default 5)
  --connect-timeout-ms N   flood: the good subscriber's connect (and I/O) timeout (default 4000)
  --io-timeout-ms N        flood: PublisherOptions::io_timeout_ms (default 2000)
  --flood-budget-s N       flood: no new try after this many seconds of attack (default 180)
  --nofile N               RLIMIT_NOFILE raised to at least N in both processes (default 8192)
  --label TEXT             names this build in the table and JSON (e.g. "old (HEAD)")
  --json FILE              also write every run's figures as JSON
  --log-dir DIR            where the publisher's stderr goes (default /tmp)
  --help                   this text

Environment: WEIGHTSYNC_SECRET is the shared secret (a fixed test secret when unset).
Internal: --role publisher [--profile crowd|flood] [--publisher-log FILE] runs the publisher child;
it prints "ADDRESS host:port" and serves until its stdin closes.
)HELP";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

long long to_number(const std::string& flag, const std::string& value, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (errno != 0 || end == value.c_str() || *end != '\0' || v < lo || v > hi) {
    throw std::invalid_argument(flag + " wants an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], not '" + value + "'");
  }
  return v;
}

Config parse(int argc, char** argv, bool* help) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      return c;
    }
    if (i + 1 >= argc) throw std::invalid_argument(a + ": unknown option or missing value (see --help)");
    const std::string v = argv[++i];
    if (a == "--role")
      c.role = v;
    else if (a == "--profile")
      c.profile = v;
    else if (a == "--publisher-log")
      c.publisher_log = v;
    else if (a == "--scenario")
      c.scenarios = split(v);
    else if (a == "--transports")
      c.transports = split(v);
    else if (a == "--bytes")
      c.bytes = static_cast<std::size_t>(to_number(a, v, 4096, 1ll << 36));
    else if (a == "--interval-ms")
      c.interval_ms = static_cast<int>(to_number(a, v, 1, 600000));
    else if (a == "--duration-s")
      c.duration_s = static_cast<int>(to_number(a, v, 1, 600));
    else if (a == "--pullers")
      c.pullers = static_cast<int>(to_number(a, v, 1, 256));
    else if (a == "--idle-sessions")
      c.idle_sessions = static_cast<int>(to_number(a, v, 0, 20000));
    else if (a == "--runs")
      c.runs = static_cast<int>(to_number(a, v, 1, 50));
    else if (a == "--max-connections")
      c.max_connections = static_cast<std::size_t>(to_number(a, v, 1, 1000000));
    else if (a == "--attackers")
      c.attackers = static_cast<int>(to_number(a, v, 0, 20000));
    else if (a == "--tries")
      c.tries = static_cast<int>(to_number(a, v, 0, 1000));
    else if (a == "--baseline-tries")
      c.baseline_tries = static_cast<int>(to_number(a, v, 0, 1000));
    else if (a == "--connect-timeout-ms")
      c.connect_timeout_ms = static_cast<int>(to_number(a, v, 1, 600000));
    else if (a == "--io-timeout-ms")
      c.io_timeout_ms = static_cast<int>(to_number(a, v, 1, 600000));
    else if (a == "--flood-budget-s")
      c.flood_budget_s = static_cast<int>(to_number(a, v, 1, 3600));
    else if (a == "--nofile")
      c.nofile = static_cast<std::size_t>(to_number(a, v, 64, 1 << 24));
    else if (a == "--max-lifetime-s")
      c.max_lifetime_s = static_cast<int>(to_number(a, v, 1, 86400));
    else if (a == "--label")
      c.label = v;
    else if (a == "--json")
      c.json_path = v;
    else if (a == "--log-dir")
      c.log_dir = v;
    else
      throw std::invalid_argument("unknown option " + a + " (see --help)");
  }
  if (c.bytes % 8 != 0) throw std::invalid_argument("--bytes must be a multiple of 8");
  for (const auto& s : c.scenarios) {
    if (s != "crowd" && s != "flood")
      throw std::invalid_argument("unknown scenario '" + s + "' (crowd, flood)");
  }
  for (const auto& t : c.transports) {
    if (t != "tcp" && t != "shm") throw std::invalid_argument("unknown transport '" + t + "' (tcp, shm)");
  }
  const char* secret = std::getenv("WEIGHTSYNC_SECRET");
  c.secret = secret != nullptr && *secret != '\0' ? secret : "crowd-bench-secret-0123456789abcdef";
  return c;
}

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

nlohmann::json to_json(const crowd::ProcSample& s) {
  return {{"threads", s.threads}, {"rss_kib", s.rss_kib}};
}

nlohmann::json to_json(const crowd::PhaseRun& r) {
  return {{"gbps", r.gbps},
          {"median_pull_s", r.median_pull_s},
          {"seconds", r.seconds},
          {"bytes", r.bytes},
          {"pulls", r.pulls},
          {"retries", r.retries},
          {"failures", r.failures},
          {"bad_content", r.bad_content},
          {"peak", to_json(r.peak)},
          {"first_error", r.first_error},
          {"negotiated", r.negotiated}};
}

nlohmann::json to_json(const std::vector<crowd::Try>& tries) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : tries) a.push_back({{"ok", t.ok}, {"seconds", t.seconds}, {"error", t.error}});
  return a;
}

template <typename F>
std::vector<double> collect(const std::vector<crowd::PhaseRun>& runs, F f) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(f(r));
  return v;
}

struct TrySummary {
  int ok = 0;
  double median_s = 0, max_s = 0;
};
TrySummary summarize(const std::vector<crowd::Try>& tries) {
  TrySummary s;
  std::vector<double> all;
  for (const auto& t : tries) {
    s.ok += t.ok ? 1 : 0;
    all.push_back(t.seconds);
    s.max_s = std::max(s.max_s, t.seconds);
  }
  s.median_s = crowd::median(all);
  return s;
}

void print_phase(const std::string& name, const std::vector<crowd::PhaseRun>& runs) {
  const double gbps = crowd::median(collect(runs, [](const crowd::PhaseRun& r) { return r.gbps; }));
  const double pull = crowd::median(collect(runs, [](const crowd::PhaseRun& r) { return r.median_pull_s; }));
  const double threads = crowd::median(
      collect(runs, [](const crowd::PhaseRun& r) { return static_cast<double>(r.peak.threads); }));
  const double rss =
      crowd::median(collect(runs, [](const crowd::PhaseRun& r) { return r.peak.rss_kib / 1024.0; }));
  std::uint64_t failures = 0, bad = 0;
  for (const auto& r : runs) failures += r.failures, bad += r.bad_content;
  std::printf("  %-34s %4zu %9.3f %12.1f %10.0f %10.0f %9llu %5llu\n", name.c_str(), runs.size(), gbps,
              pull * 1000, threads, rss, static_cast<unsigned long long>(failures),
              static_cast<unsigned long long>(bad));
}

int drive(const Config& cfg) {
  const std::string self = self_path();
  const std::size_t nofile = crowd::raise_nofile(cfg.nofile);
  std::vector<crowd::CrowdResult> crowds;
  std::vector<crowd::FloodResult> floods;
  for (const auto& s : cfg.scenarios) {
    if (s == "crowd") {
      for (const auto& t : cfg.transports) crowds.push_back(crowd::run_crowd(cfg, self, t));
    } else {
      floods.push_back(crowd::run_flood(cfg, self));
    }
  }

  std::printf("\nweightsync-crowd-bench%s%s (library %s): %zu-byte versions every %d ms, RLIMIT_NOFILE %zu\n",
              cfg.label.empty() ? "" : " ", cfg.label.c_str(), weightsync::version(), cfg.bytes,
              cfg.interval_ms, nofile);
  nlohmann::json j;
  j["label"] = cfg.label;
  j["library_version"] = weightsync::version();
  j["bytes"] = cfg.bytes;
  j["interval_ms"] = cfg.interval_ms;
  j["nofile"] = nofile;
  for (const auto& c : crowds) {
    std::printf(
        "\ncrowd, transport %s: %d pullers x %d s, medians of %d runs (pub threads/RSS: peak in a run)\n",
        c.transport.c_str(), cfg.pullers, cfg.duration_s, cfg.runs);
    std::printf("  %-34s %4s %9s %12s %10s %10s %9s %5s\n", "phase", "runs", "GB/s", "pull ms", "pub thr",
                "pub MiB", "failures", "bad");
    print_phase("pullers alone", c.alone);
    std::printf("  %-34s %4s %9s %12s %10ld %10ld\n", "nothing connected", "-", "-", "-",
                c.before_idle.threads, c.before_idle.rss_kib / 1024);
    std::printf("  %-34s %4s %9s %12s %10ld %10ld\n",
                (std::to_string(c.idle_opened) + " idle sessions").c_str(), "-", "-", "-", c.idle.threads,
                c.idle.rss_kib / 1024);
    print_phase("pullers + idle sessions", c.with_idle);
    const double a = crowd::median(collect(c.alone, [](const crowd::PhaseRun& r) { return r.gbps; }));
    const double b = crowd::median(collect(c.with_idle, [](const crowd::PhaseRun& r) { return r.gbps; }));
    std::printf("  throughput with/without idle sessions: %.3f\n", a > 0 ? b / a : 0.0);
    std::printf("  idle sessions: %d opened, %d failed in %.1f s, %d still answering at the end%s%s\n",
                c.idle_opened, c.idle_failed, c.idle_open_seconds, c.idle_alive_at_end,
                c.idle_first_error.empty() ? "" : "; first error: ", c.idle_first_error.c_str());
    std::printf("  publisher: %s\n", c.publisher_stats.c_str());
    nlohmann::json cj;
    cj["transport"] = c.transport;
    cj["pullers"] = cfg.pullers;
    cj["duration_s"] = cfg.duration_s;
    for (const auto& r : c.alone) cj["alone"].push_back(to_json(r));
    for (const auto& r : c.with_idle) cj["with_idle"].push_back(to_json(r));
    cj["median_gbps_alone"] = a;
    cj["median_gbps_with_idle"] = b;
    cj["ratio"] = a > 0 ? b / a : 0.0;
    cj["before_idle"] = to_json(c.before_idle);
    cj["idle"] = to_json(c.idle);
    cj["idle_opened"] = c.idle_opened;
    cj["idle_failed"] = c.idle_failed;
    cj["idle_open_seconds"] = c.idle_open_seconds;
    cj["idle_alive_at_end"] = c.idle_alive_at_end;
    cj["idle_first_error"] = c.idle_first_error;
    cj["publisher_stats"] = c.publisher_stats;
    j["crowd"].push_back(cj);
  }
  for (const auto& f : floods) {
    const TrySummary base = summarize(f.baseline);
    const TrySummary att = summarize(f.tries);
    std::printf(
        "\nflood: %d attacker connections, good subscriber connect_timeout %d ms, publisher io_timeout %d "
        "ms\n",
        cfg.attackers, cfg.connect_timeout_ms, cfg.io_timeout_ms);
    std::printf("  %-34s %9s %10s %10s %10s %10s\n", "phase", "ok/tries", "median s", "max s", "pub thr",
                "pub MiB");
    std::printf("  %-34s %4d/%-4zu %10.3f %10.3f %10ld %10ld\n", "no attacker", base.ok, f.baseline.size(),
                base.median_s, base.max_s, f.before.threads, f.before.rss_kib / 1024);
    std::printf("  %-34s %4d/%-4d %10.3f %10.3f %10ld %10ld\n", "under attack", att.ok,
                static_cast<int>(f.tries.size()) + f.tries_not_run, att.median_s, att.max_s, f.peak.threads,
                f.peak.rss_kib / 1024);
    std::printf(
        "  attacker: %d open after warm-up, %llu established, %llu closed by the publisher, %llu connect "
        "errors over %.1f s\n",
        f.attacker_open_at_warmup, static_cast<unsigned long long>(f.attacker_opened),
        static_cast<unsigned long long>(f.attacker_closed_by_publisher),
        static_cast<unsigned long long>(f.attacker_connect_errors), f.attack_seconds);
    if (f.tries_not_run > 0) std::printf("  %d tries not run (--flood-budget-s)\n", f.tries_not_run);
    std::vector<std::string> errors;
    for (const auto& t : f.tries) {
      if (!t.ok && std::find(errors.begin(), errors.end(), t.error) == errors.end())
        errors.push_back(t.error);
    }
    for (const auto& e : errors) std::printf("  error seen: %s\n", e.c_str());
    std::printf("  publisher: %s\n", f.publisher_stats.c_str());
    nlohmann::json fj;
    fj["attackers"] = cfg.attackers;
    fj["baseline"] = to_json(f.baseline);
    fj["tries"] = to_json(f.tries);
    fj["tries_not_run"] = f.tries_not_run;
    fj["ok"] = att.ok;
    fj["median_s"] = att.median_s;
    fj["max_s"] = att.max_s;
    fj["before"] = to_json(f.before);
    fj["under_attack"] = to_json(f.under_attack);
    fj["peak"] = to_json(f.peak);
    fj["attacker_open_at_warmup"] = f.attacker_open_at_warmup;
    fj["attacker_opened"] = f.attacker_opened;
    fj["attacker_closed_by_publisher"] = f.attacker_closed_by_publisher;
    fj["attacker_connect_errors"] = f.attacker_connect_errors;
    fj["attack_seconds"] = f.attack_seconds;
    fj["elapsed_seconds"] = f.elapsed_seconds;
    fj["publisher_stats"] = f.publisher_stats;
    j["flood"].push_back(fj);
  }
  std::fflush(stdout);
  if (!cfg.json_path.empty()) {
    std::ofstream out(cfg.json_path);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", cfg.json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    bool help = false;
    const Config cfg = parse(argc, argv, &help);
    if (help) {
      std::fputs(kHelp, stdout);
      return 0;
    }
    if (cfg.role == "publisher") return crowd::run_publisher_role(cfg);
    if (!cfg.role.empty()) throw std::invalid_argument("unknown role '" + cfg.role + "'");
    return drive(cfg);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "weightsync-crowd-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weightsync-crowd-bench: %s\n", e.what());
    return 1;
  }
}
