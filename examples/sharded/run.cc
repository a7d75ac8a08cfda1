// The run role (run.h). Starts the trainer ranks (each prints "ADDRESS"),
// then the generator ranks with those addresses (each prints "READY" once
// connected and prepared), then tells the trainers when tick 0 of their
// shared clock is ("start EPOCH_MS"). Relays every line, waits for the
// generators within --timeout-s, tells the trainers to "quit", and prints a
// SUMMARY. Exits 0 only if every process exited 0 and every generator
// printed a RESULT with the pulls asked for. On a timeout or an error every
// child is killed (ChildProcess's destructor): nothing is left running.
#include "run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "child_process.h"

namespace sharded {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  std::string name;
  wsutil::ChildProcess process;
  std::optional<int> exit_code;
  std::string result;  // a generator's RESULT line
};

std::string self_path() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "";
  return std::string(path, static_cast<std::size_t>(n));
}

std::int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The number after "key=" in a RESULT line; 0 if absent.
double field(const std::string& line, const std::string& key) {
  const auto at = line.find(" " + key + "=");
  if (at == std::string::npos) return 0.0;
  return std::strtod(line.c_str() + at + key.size() + 2, nullptr);
}

std::uint64_t count(const std::string& line, const std::string& key) {
  return static_cast<std::uint64_t>(field(line, key));
}

std::chrono::milliseconds left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

void relay(Child& child, const std::string& line) {
  std::printf("%-11s | %s\n", child.name.c_str(), line.c_str());
  std::fflush(stdout);
  if (line.rfind("RESULT ", 0) == 0) child.result = line;
}

// Relays what `child` printed so far; true once it has exited and all its output is read.
bool pump(Child& child) {
  if (child.exit_code) return true;
  const auto code = child.process.wait(std::chrono::milliseconds(0));
  // Once it has exited, read to the end of its output (EOF comes at once).
  // A wait under ~2 ms may return before polling at all (LineStream rounds
  // the time left down to whole ms), hence 5 ms.
  const auto timeout = std::chrono::milliseconds(code ? 2000 : 5);
  while (auto line = child.process.read_line(timeout)) relay(child, *line);
  if (code) child.exit_code = code;
  return code.has_value();
}

// Relays `child`'s lines until one starts with `prefix`; returns the rest of it.
std::optional<std::string> expect(Child& child, const std::string& prefix, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    auto line = child.process.read_line(left(deadline));
    if (!line) return std::nullopt;  // exited, or timed out
    relay(child, *line);
    if (line->rfind(prefix, 0) == 0) return line->substr(prefix.size());
  }
  return std::nullopt;
}

}  // namespace

CLI::App* add_run_command(CLI::App& app, ModelOptions& model, RunOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "The whole demo on localhost: trainer and generator processes, every byte of every pull checked");
  cmd->add_option("--transport", o.transport, "Data transport of the generators: tcp, shm, auto")
      ->capture_default_str();
  cmd->add_flag("--stress", o.stress,
                "Trainer ranks publish out of step every ~2 ms; each generator pulls the newest complete "
                "version back to back (--pulls times), none may be mixed");
  cmd->add_option("--trainer-ranks", o.trainer_ranks, "Trainer processes (rows split)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--engine-ranks", o.engine_ranks, "Generator processes (TP degree)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--pulls", o.pulls, "Pulls per generator (default: each version once; 5000 with --stress)");
  cmd->add_option("--versions", o.versions,
                  "Versions the trainers publish (default: 3; with --stress, until the generators are done)");
  cmd->add_option("--period-ms", o.period_ms, "Time between versions (default: 300; 2 with --stress)");
  cmd->add_option("--jitter-ms", o.jitter_ms,
                  "Per-version random delay of each rank (default: 100; 1.5 with --stress)");
  cmd->add_flag("--checksum", o.checksum, "Trainers compute checksums; generators verify each view's");
  cmd->add_option("--timeout-s", o.timeout_s, "Stop everything and fail after this long")
      ->capture_default_str();
  add_model_options(*cmd, model);
  return cmd;
}

int run_demo(ModelOptions model, RunOptions o, bool model_given) {
  // Defaults by mode. The stress model is small so that 10,000 checked pulls
  // and a version every ~2 ms fit two cores in seconds.
  if (o.stress && !model_given) model = ModelOptions{2, 64, 16, 128, 256};
  if (o.pulls == 0 && o.stress) o.pulls = 5000;
  if (o.versions == 0) o.versions = o.stress ? 100000000 : 3;
  if (o.period_ms <= 0) o.period_ms = o.stress ? 2.0 : 300.0;
  if (o.jitter_ms < 0) o.jitter_ms = o.stress ? 1.5 : 100.0;
  if (const std::string why = check_divisible(model, o.trainer_ranks, o.engine_ranks); !why.empty()) {
    return std::fprintf(stderr, "run: %s\n", why.c_str()), 2;
  }
  const std::string self = self_path();
  if (self.empty()) return std::fprintf(stderr, "run: cannot find this executable (/proc/self/exe)\n"), 2;
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  const std::vector<std::string> model_args = model_arguments(model);
  std::printf("run: %d trainer ranks (rows split) -> %d engine ranks (TP=%d) over %s; %s\n", o.trainer_ranks,
              o.engine_ranks, o.engine_ranks, o.transport.c_str(),
              o.stress ? "stress: ranks publish out of step, generators pull back to back"
                       : "each generator pulls every version");
  std::fflush(stdout);

  std::vector<std::unique_ptr<Child>> trainers, generators;
  std::string addresses;
  try {
    for (int r = 0; r < o.trainer_ranks; ++r) {
      std::vector<std::string> argv = {
          self, "trainer", "--rank", std::to_string(r), "--ranks", std::to_string(o.trainer_ranks)};
      argv.insert(argv.end(),
                  {"--versions", std::to_string(o.versions), "--period-ms", std::to_string(o.period_ms),
                   "--jitter-ms", std::to_string(o.jitter_ms), "--print-every", o.stress ? "1000" : "1"});
      if (o.checksum) argv.push_back("--checksum");
      argv.insert(argv.end(), model_args.begin(), model_args.end());
      trainers.push_back(
          std::make_unique<Child>(Child{"trainer " + std::to_string(r), wsutil::ChildProcess::spawn(argv)}));
    }
    for (auto& t : trainers) {
      auto address = expect(*t, "ADDRESS ", deadline);
      if (!address) return std::fprintf(stderr, "run: %s printed no address\n", t->name.c_str()), 1;
      addresses += (addresses.empty() ? "" : ",") + *address;
    }
    for (int g = 0; g < o.engine_ranks; ++g) {
      std::vector<std::string> argv = {self,          "generator",
                                       "--rank",      std::to_string(g),
                                       "--ranks",     std::to_string(o.engine_ranks),
                                       "--trainers",  addresses,
                                       "--transport", o.transport};
      if (o.stress) {
        argv.insert(argv.end(), {"--pulls", std::to_string(o.pulls), "--repull"});
      } else if (o.pulls > 0) {
        argv.insert(argv.end(), {"--pulls", std::to_string(o.pulls)});
      } else {
        argv.insert(argv.end(), {"--versions", std::to_string(o.versions)});
      }
      argv.insert(argv.end(), model_args.begin(), model_args.end());
      generators.push_back(std::make_unique<Child>(
          Child{"generator " + std::to_string(g), wsutil::ChildProcess::spawn(argv)}));
    }
    for (auto& g : generators) {
      if (!expect(*g, "READY ", deadline)) {
        pump(*g);
        return std::fprintf(stderr, "run: %s did not get ready\n", g->name.c_str()), 1;
      }
    }
    // Every generator is connected: start the trainers' clock.
    const std::string start = "start " + std::to_string(epoch_ms() + 100);
    for (auto& t : trainers) t->process.write_line(start);

    // Relay until every generator is done.
    bool timed_out = false;
    for (;;) {
      bool all_done = true;
      for (auto& g : generators) all_done = pump(*g) && all_done;
      for (auto& t : trainers) pump(*t);
      if (all_done) break;
      if (Clock::now() >= deadline) {
        timed_out = true;
        break;
      }
    }
    if (timed_out) {
      std::printf("run: FAILED: timed out after %d s; stopping every process\n", o.timeout_s);
      return 1;
    }
    // The trainers serve until told to quit.
    for (auto& t : trainers) {
      if (t->exit_code) continue;
      try {
        t->process.write_line("quit");
      } catch (const std::exception&) {
      }
    }
    const auto quit_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    for (;;) {
      bool all_done = true;
      for (auto& t : trainers) all_done = pump(*t) && all_done;
      if (all_done || Clock::now() >= quit_deadline) break;
    }
  } catch (const std::exception& e) {
    return std::fprintf(stderr, "run: %s\n", e.what()), 1;
  }

  // The verdict.
  bool ok = true;
  std::uint64_t pulls = 0, mixed = 0, bad = 0, rounds = 0, seen = 0;
  double seconds = 0.0;
  for (auto& t : trainers) {
    if (t->exit_code != 0) {
      ok = false;
      std::printf("run: %s %s\n", t->name.c_str(),
                  t->exit_code ? ("exited with " + std::to_string(*t->exit_code)).c_str() : "did not quit");
    }
  }
  const std::uint64_t wanted = o.pulls > 0 ? o.pulls : o.versions;
  for (auto& g : generators) {
    const std::uint64_t got = count(g->result, "pulls");
    if (g->exit_code != 0 || g->result.empty() || got < wanted) {
      ok = false;
      std::printf("run: %s failed (exit code %d, %llu of %llu pulls%s)\n", g->name.c_str(),
                  g->exit_code.value_or(-1), static_cast<unsigned long long>(got),
                  static_cast<unsigned long long>(wanted), g->result.empty() ? ", no RESULT line" : "");
    }
    pulls += got;
    mixed += count(g->result, "mixed");
    bad += count(g->result, "bad");
    rounds += count(g->result, "rounds");
    seen = std::max(seen, count(g->result, "versions_seen"));
    seconds = std::max(seconds, field(g->result, "seconds"));
  }
  std::printf(
      "SUMMARY %d trainer ranks (rows split) -> %d engine ranks (TP=%d, fused qkv and gate_up) over %s: "
      "%llu pulls, %llu mixed, %llu bad, %llu rounds restarted, up to %llu versions seen per rank, %.2f s: "
      "%s\n",
      o.trainer_ranks, o.engine_ranks, o.engine_ranks, o.transport.c_str(),
      static_cast<unsigned long long>(pulls), static_cast<unsigned long long>(mixed),
      static_cast<unsigned long long>(bad), static_cast<unsigned long long>(rounds),
      static_cast<unsigned long long>(seen), seconds, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace sharded
