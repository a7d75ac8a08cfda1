// weightsync-crowd-bench: what many connections cost a publisher, and whether
// a flood of unauthenticated ones locks good subscribers out (docs/security.md,
// raw figures in docs/perf/security-figures.md).
//
// The tool re-executes itself as the publisher process (`--role publisher`),
// drives it from the parent over the public API, and reads the publisher's
// /proc/<pid>/status for its thread count and resident memory. The flood's
// attacker builds its frames with the internal wire headers, the only
// internal code used, so the same source builds against every version of the
// library that has them (the before/after comparison).
//
// Threads: the driver's scenario functions are called from main() only; each
// starts and joins its own threads. Every loop is bounded in count and time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "child_process.h"

namespace crowd {

struct Config {
  // Both roles.
  std::size_t bytes = 64u << 20;  // one tensor of this many bytes, a multiple of 8
  int interval_ms = 200;          // a new version this often
  std::size_t nofile = 8192;      // RLIMIT_NOFILE raised to at least this
  // Publisher role.
  std::string role;               // "" (driver) or "publisher"
  std::string profile = "crowd";  // crowd: max_connections; flood: io_timeout_ms
  std::size_t max_connections = 4096;
  int io_timeout_ms = 2000;  // flood profile only
  int max_lifetime_s = 1800;
  std::string publisher_log;  // the publisher's stderr goes here ("" = inherit)
  // Driver.
  std::vector<std::string> scenarios{"crowd", "flood"};
  std::vector<std::string> transports{"tcp"};
  int duration_s = 10;
  int pullers = 16;
  int idle_sessions = 1000;
  int runs = 3;
  int attackers = 1000;
  int tries = 20;
  int baseline_tries = 5;
  int connect_timeout_ms = 4000;
  int flood_budget_s = 180;
  std::string label;  // e.g. "old (HEAD)" or "new (work tree)"
  std::string json_path;
  std::string log_dir = "/tmp";
  std::string secret;
};

// ---- Shared helpers (crowd_support.cc) ----

struct ProcSample {
  long threads = -1;
  long rss_kib = -1;
};
ProcSample sample_process(pid_t pid);
// Raises RLIMIT_NOFILE (soft and hard) to at least `at_least`; returns the soft limit now.
std::size_t raise_nofile(std::size_t at_least);
double now_seconds();  // steady clock
double median(std::vector<double> values);
// The recognisable content of `version`: 64-bit word k = k * 0x0101010101010101 + version * golden.
void fill_pattern(void* data, std::size_t bytes, std::uint64_t version);
// Mismatching words; `stride_words` 1 checks every word.
std::size_t check_pattern(const void* data, std::size_t bytes, std::uint64_t version,
                          std::size_t stride_words);

// The publisher child: `--role publisher --profile PROFILE`, stderr to `log`.
struct PublisherProcess {
  std::unique_ptr<wsutil::ChildProcess> child;
  std::string address;  // "127.0.0.1:port"
  pid_t pid() const { return child ? child->pid() : -1; }
  // Closes its stdin, waits (bounded) for it to exit; returns its STATS line.
  std::string stop();
};
// Throws std::runtime_error if it does not print its address within 60 s.
PublisherProcess start_publisher(const Config& cfg, const std::string& self, const std::string& profile,
                                 const std::string& log);

// ---- Roles and scenarios ----

int run_publisher_role(const Config& cfg);  // crowd_publisher.cc

struct PhaseRun {
  double gbps = 0;           // bytes / (start to the end of the last pull)
  double median_pull_s = 0;  // over every pull of the run
  double seconds = 0;
  std::uint64_t bytes = 0;
  std::uint64_t pulls = 0;
  std::uint64_t retries = 0;
  std::uint64_t failures = 0;     // connect or pull errors
  std::uint64_t bad_content = 0;  // pulls whose sampled words did not match
  ProcSample peak;                // publisher, during the run
  std::string first_error;
  std::string negotiated;  // the transports the pullers got, e.g. "tcp"
};

struct CrowdResult {
  std::string transport;
  std::vector<PhaseRun> alone;      // the pullers alone
  std::vector<PhaseRun> with_idle;  // the same, with the idle sessions open
  ProcSample before_idle;           // publisher after the first phase, nothing connected
  ProcSample idle;                  // 1 s after the idle sessions were opened
  int idle_opened = 0;
  int idle_failed = 0;
  double idle_open_seconds = 0;
  int idle_alive_at_end = 0;  // latest_version() still answered after the second phase
  std::string idle_first_error;
  std::string publisher_stats;
};

struct Try {
  bool ok = false;
  double seconds = 0;  // connect + pull + check
  std::string error;
};

struct FloodResult {
  std::vector<Try> baseline;  // before the attacker starts
  std::vector<Try> tries;     // with the attacker running
  int tries_not_run = 0;      // cut by the time budget
  ProcSample before;
  ProcSample under_attack;            // after the attacker's warm-up
  ProcSample peak;                    // during the tries
  std::uint64_t attacker_opened = 0;  // connections established
  std::uint64_t attacker_closed_by_publisher = 0;
  std::uint64_t attacker_connect_errors = 0;
  int attacker_open_at_warmup = 0;
  double attack_seconds = 0;
  double elapsed_seconds = 0;
  std::string publisher_stats;
};

CrowdResult run_crowd(const Config& cfg, const std::string& self,
                      const std::string& transport);                // crowd_scenario.cc
FloodResult run_flood(const Config& cfg, const std::string& self);  // crowd_flood.cc

}  // namespace crowd
