// The generator role (generator.h): computes the RoutingPlan once, allocates
// this engine rank's destination tensors and binds the plan to them, connects
// a SubscriberGroup to every trainer rank and prepares it once, prints
// "READY", then pulls: exactly one version, exactly versions 1..N, or N
// times the newest complete version. Before each pull the destinations are
// zeroed; after it every element is checked against values.h for the
// delivered version (checker.h). Ends with one line
//   RESULT rank=g pulls=N mixed=M bad=B versions_seen=K rounds=X registrations=Y seconds=S ...
// and exits 0 only if every pull was delivered and whole: no mixed or bad
// pull, and no memory registration after the first pull.
#include "generator.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "checker.h"
#include "weightsync/weightsync.h"

namespace sharded {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::uint64_t registrations(weightsync::SubscriberGroup& group) {
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < group.size(); ++r) total += group.member(r).stats().registrations;
  return total;
}

}  // namespace

CLI::App* add_generator_command(CLI::App& app, ModelOptions& model, GeneratorOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "generator",
      "One engine rank: pull its TP slices of each version from every trainer rank and check them");
  cmd->add_option("--rank", o.rank, "This engine rank")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--ranks", o.ranks, "Engine ranks in all (the TP degree)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--trainers", o.trainers, "Trainer ranks' addresses, rank order (host:port,host:port)")
      ->required()
      ->delimiter(',');
  cmd->add_option("--transport", o.transport, "Data transport: auto, tcp, shm, ...")->capture_default_str();
  auto* version = cmd->add_option("--version", o.version, "Pull exactly this version, once");
  auto* versions = cmd->add_option("--versions", o.versions, "Pull exactly versions 1..N, one after another");
  auto* pulls = cmd->add_option("--pulls", o.pulls, "Pull the newest complete version N times");
  version->excludes(versions)->excludes(pulls);
  versions->excludes(pulls);
  cmd->add_flag("--repull", o.repull,
                "With --pulls: take the newest complete version even if it is the one held "
                "(never waits for the trainers: a stress loop)");
  cmd->add_option("--wait-ms", o.wait_ms, "How long one pull waits for a complete version")
      ->capture_default_str();
  cmd->add_option("--max-rounds", o.max_rounds, "GroupPullOptions::max_rounds")->capture_default_str();
  cmd->add_option("--progress-every", o.progress_every, "With --pulls: a PROGRESS line every this many pulls")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_model_options(*cmd, model);
  return cmd;
}

int run_generator(const ModelOptions& model, const GeneratorOptions& o) {
  const int trainer_ranks = static_cast<int>(o.trainers.size());
  if (o.rank >= o.ranks) return std::fprintf(stderr, "generator: --rank must be below --ranks\n"), 2;
  if (const std::string why = check_divisible(model, trainer_ranks, o.ranks); !why.empty()) {
    return std::fprintf(stderr, "generator: %s\n", why.c_str()), 2;
  }
  const auto g = static_cast<std::size_t>(o.rank);

  // 1. The plan, once.
  const auto source = trainer_source(model, trainer_ranks);
  const auto target = engine_target(model, o.ranks);
  const auto plan_start = Clock::now();
  auto plan = weightsync::RoutingPlan::compute(source, target);
  const double plan_ms = seconds_since(plan_start) * 1e3;
  if (!plan.ok())
    return std::fprintf(stderr, "generator %d: %s\n", o.rank, plan.status().to_string().c_str()), 2;
  std::printf("PLAN rank=%d compute_ms=%.3f reads=%zu (whole plan:", o.rank, plan_ms, plan->read_count());
  std::printf(" %d trainer ranks -> %d engine ranks);", trainer_ranks, o.ranks);
  for (int r = 0; r < trainer_ranks; ++r) {
    const auto tr = static_cast<std::size_t>(r);
    std::printf(" from trainer rank %d: %zu reads, %llu bytes;", r, plan->reads(g, tr).size(),
                static_cast<unsigned long long>(plan->bytes(g, tr)));
  }
  std::printf("\n");

  // 2. Destination tensors, bound once.
  std::vector<weightsync::HostBuffer> memory;
  std::unordered_map<std::string, void*> buffers;
  for (const auto& dest : target.ranks[g]) {
    auto buffer = weightsync::HostBuffer::allocate(dest.bytes());
    if (!buffer.ok())
      return std::fprintf(stderr, "generator %d: %s\n", o.rank, buffer.status().to_string().c_str()), 2;
    buffers[dest.name] = buffer->data();
    memory.push_back(std::move(*buffer));
  }
  auto destinations = plan->bind(g, buffers);
  if (!destinations.ok()) {
    return std::fprintf(stderr, "generator %d: %s\n", o.rank, destinations.status().to_string().c_str()), 2;
  }
  const Checker checker(source, target, g, buffers);

  // 3. One Subscriber per trainer rank, prepared once.
  weightsync::SubscriberOptions options;
  options.transport = o.transport;
  options.client_name = "generator" + std::to_string(o.rank);
  auto group = weightsync::SubscriberGroup::connect(o.trainers, options);
  if (!group.ok())
    return std::fprintf(stderr, "generator %d: %s\n", o.rank, group.status().to_string().c_str()), 1;
  auto plans = (*group)->prepare(*destinations);
  if (!plans.ok())
    return std::fprintf(stderr, "generator %d: %s\n", o.rank, plans.status().to_string().c_str()), 1;
  std::string transports;
  for (std::size_t r = 0; r < (*group)->size(); ++r) {
    transports += (r ? "," : "") + (*group)->member(r).transport();
  }
  std::printf("READY rank=%d transport=%s\n", o.rank, transports.c_str());
  std::fflush(stdout);

  // 4. Pull, check, repeat.
  const bool exact_each = o.versions > 0;
  const std::uint64_t total = o.version > 0 ? 1 : exact_each ? o.versions : o.pulls > 0 ? o.pulls : 1;
  std::uint64_t pulls = 0, mixed = 0, bad = 0, versions_seen = 0, rounds = 0, last = 0,
                first_registrations = 0;
  int problems_told = 0;
  bool checksums = true;
  const auto start = Clock::now();
  // The last line; returns whether this rank passed.
  auto result_line = [&](bool pull_failed) {
    const std::uint64_t now_registrations = registrations(**group);
    const std::uint64_t steady = pulls > 0 ? now_registrations - first_registrations : 0;
    const bool ok = !pull_failed && mixed == 0 && bad == 0 && steady == 0;
    const char* status = pull_failed ? "pull-failed" : ok ? "ok" : "FAILED";
    std::printf(
        "RESULT rank=%d pulls=%llu mixed=%llu bad=%llu versions_seen=%llu rounds=%llu registrations=%llu "
        "seconds=%.3f last_version=%llu steady_registrations=%llu checksums=%s transport=%s status=%s\n",
        o.rank, static_cast<unsigned long long>(pulls), static_cast<unsigned long long>(mixed),
        static_cast<unsigned long long>(bad), static_cast<unsigned long long>(versions_seen),
        static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(now_registrations),
        seconds_since(start), static_cast<unsigned long long>(last), static_cast<unsigned long long>(steady),
        pulls > 0 && checksums ? "verified" : "none", transports.c_str(), status);
    if (steady != 0) {
      std::printf(
          "ERROR rank=%d: %llu memory registrations after the first pull (the steady loop must make none)\n",
          o.rank, static_cast<unsigned long long>(steady));
    }
    std::fflush(stdout);
    return ok;
  };
  for (std::uint64_t i = 0; i < total; ++i) {
    weightsync::GroupPullOptions pull_options;
    pull_options.wait = std::chrono::milliseconds(o.wait_ms);
    pull_options.max_rounds = o.max_rounds;
    if (o.version > 0) {
      pull_options.version = o.version;
    } else if (exact_each) {
      pull_options.version = i + 1;
    } else if (o.repull) {
      pull_options.newer_than = last > 0 ? last - 1 : 0;
    }
    for (auto& buffer : memory) std::memset(buffer.data(), 0, buffer.size());
    auto got = (*group)->pull(*plans, pull_options);
    if (!got.ok()) {
      std::printf("ERROR rank=%d pull %llu: %s (what to do: %s)\n", o.rank,
                  static_cast<unsigned long long>(i + 1), got.status().to_string().c_str(),
                  weightsync::to_string(got.status().action()));
      result_line(true);
      return 1;
    }
    ++pulls;
    if (pulls == 1) first_registrations = registrations(**group);
    rounds += got->rounds;
    checksums = checksums && got->checksums_verified;
    if (got->version != last) ++versions_seen;
    CheckResult check = checker.check(got->version);
    if (pull_options.version && got->version != *pull_options.version) {
      ++check.bad;
      check.first_problem = "version " + std::to_string(got->version) + " delivered when " +
                            std::to_string(*pull_options.version) + " was asked for";
    } else if (got->version < last) {
      ++check.bad;
      check.first_problem =
          "version " + std::to_string(got->version) + " delivered after " + std::to_string(last);
    }
    for (std::size_t r = 0; r < got->members.size(); ++r) {
      const auto& member = got->members[r];
      if (member.version != 0 && member.version != got->version) {
        ++check.mixed;
        check.first_problem = "trainer rank " + std::to_string(r) + " reports version " +
                              std::to_string(member.version) + " in a pull of " +
                              std::to_string(got->version);
      }
    }
    last = std::max(last, got->version);
    mixed += check.mixed > 0;
    bad += check.bad > 0;
    if (!check.first_problem.empty() && problems_told++ < 5) {
      std::printf(
          "MISMATCH rank=%d pull %llu of version %llu: %llu mixed and %llu bad elements of %llu; first: %s\n",
          o.rank, static_cast<unsigned long long>(pulls), static_cast<unsigned long long>(got->version),
          static_cast<unsigned long long>(check.mixed), static_cast<unsigned long long>(check.bad),
          static_cast<unsigned long long>(check.elements), check.first_problem.c_str());
    }
    if (o.pulls == 0) {
      std::printf("PULLED rank=%d version=%llu bytes=%llu elements=%llu rounds=%u seconds=%.4f %s\n", o.rank,
                  static_cast<unsigned long long>(got->version), static_cast<unsigned long long>(got->bytes),
                  static_cast<unsigned long long>(check.elements), got->rounds, got->seconds,
                  check.first_problem.empty() ? "verified" : "WRONG");
    } else if (pulls % o.progress_every == 0) {
      std::printf("PROGRESS rank=%d pulls=%llu version=%llu rounds=%llu mixed=%llu bad=%llu\n", o.rank,
                  static_cast<unsigned long long>(pulls), static_cast<unsigned long long>(got->version),
                  static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(mixed),
                  static_cast<unsigned long long>(bad));
    }
    std::fflush(stdout);
  }
  return result_line(false) ? 0 : 1;
}

}  // namespace sharded
