// The trainer role (trainer.h): creates a Publisher for this rank's layout
// (ShardedSource::rank_layout), prints "ADDRESS host:port", then publishes
// versions 1..N in place (begin_publish + SlotWriter::tensor), version v at
// start + v * period + a uniform jitter in [0, jitter): every rank follows the
// same clock, so the ranks drift apart by at most about one version, like
// trainer ranks around their optimizer step. Prints "PUBLISHED v" (every
// --print-every versions), stops early on "quit" or the end of stdin, and
// after the last version serves until then (at most --linger-s).
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "box_walk.h"
#include "stdin_lines.h"
#include "values.h"
#include "weightsync/weightsync.h"

namespace sharded {
namespace {

using SystemClock = std::chrono::system_clock;

// One shard this rank writes: where its values come from.
struct Shard {
  std::string local_name;
  std::uint32_t tensor_id = 0;
  Shape global_shape;
  Span box;
};

std::vector<Shard> rank_shards(const weightsync::ShardedSource& source, std::size_t rank) {
  std::vector<Shard> out;
  for (const auto& shard : source.ranks[rank]) {
    for (std::size_t id = 0; id < source.tensors.size(); ++id) {
      if (source.tensors[id].name != shard.tensor) continue;
      const Shape& shape = source.tensors[id].shape;
      out.push_back(
          Shard{shard.local_name, static_cast<std::uint32_t>(id), shape, resolve(shard.box, shape)});
    }
  }
  return out;
}

void fill(std::uint32_t* data, const Shard& shard, std::uint64_t version) {
  const Shape origin(shard.global_shape.size(), 0);
  for_each_run(shard.global_shape, shard.box, shard.box.size, origin,
               [&](std::uint64_t global, std::uint64_t local, std::uint64_t length) {
                 std::uint32_t* out = data + local;
                 for (std::uint64_t k = 0; k < length; ++k)
                   out[k] = element_bits(version, shard.tensor_id, global + k);
               });
}

// Waits for "start T" (T: Unix epoch ms); -1 on "quit", the end of stdin or timeout.
std::int64_t wait_for_start(StdinLines& in, std::chrono::seconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    auto line = in.read(std::chrono::milliseconds(100));
    if (!line) {
      if (in.closed()) return -1;
      continue;
    }
    if (line->rfind("start ", 0) == 0) return std::stoll(line->substr(6));
    if (*line == "quit") return -1;
  }
  return -1;
}

}  // namespace

CLI::App* add_trainer_command(CLI::App& app, ModelOptions& model, TrainerOptions& o) {
  CLI::App* cmd = app.add_subcommand("trainer", "One trainer rank: publish its row shards of versions 1..N");
  cmd->add_option("--rank", o.rank, "This trainer rank")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--ranks", o.ranks, "Trainer ranks in all")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--versions", o.versions, "Publish versions 1..N")->capture_default_str();
  cmd->add_option("--period-ms", o.period_ms, "Time between versions")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--jitter-ms", o.jitter_ms, "Each version lands up to this much after its tick (uniform)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--start-at", o.start_at_ms,
                  "Unix epoch ms of the clock's tick 0 (version v at start + v * period); "
                  "default: wait for a line 'start EPOCH_MS' on stdin");
  cmd->add_option("--slots", o.slots, "Ring slots of the Publisher")
      ->capture_default_str()
      ->check(CLI::Range(2, 1024));
  cmd->add_flag("--checksum", o.checksum, "Compute checksums (subscribers verify the bytes of their views)");
  cmd->add_option("--print-every", o.print_every, "Print 'PUBLISHED v' every this many versions")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--linger-s", o.linger_s, "After the last version, serve at most this long")
      ->capture_default_str();
  add_model_options(*cmd, model);
  return cmd;
}

int run_trainer(const ModelOptions& model, const TrainerOptions& o) {
  if (o.rank >= o.ranks) return std::fprintf(stderr, "trainer: --rank must be below --ranks\n"), 2;
  const auto source = trainer_source(model, o.ranks);
  auto layout = source.rank_layout(static_cast<std::size_t>(o.rank));
  if (!layout.ok()) return std::fprintf(stderr, "trainer: %s\n", layout.status().to_string().c_str()), 2;
  const std::vector<Shard> shards = rank_shards(source, static_cast<std::size_t>(o.rank));

  weightsync::PublisherOptions options;
  options.slots = static_cast<std::size_t>(o.slots);
  options.checksum = o.checksum;
  auto publisher = weightsync::Publisher::create(*layout, options);
  if (!publisher.ok())
    return std::fprintf(stderr, "trainer: %s\n", publisher.status().to_string().c_str()), 2;
  std::printf("ADDRESS %s\n", (*publisher)->address().c_str());
  std::fprintf(stderr, "trainer %d: %zu shards, %llu bytes per version, %d slots\n", o.rank, shards.size(),
               static_cast<unsigned long long>(layout->payload_bytes()), o.slots);
  std::fflush(stdout);

  StdinLines in;
  const std::int64_t start_ms =
      o.start_at_ms >= 0 ? o.start_at_ms : wait_for_start(in, std::chrono::seconds(o.linger_s));
  if (start_ms < 0) return std::fprintf(stderr, "trainer %d: no 'start' line; stopping\n", o.rank), 1;
  const auto start = SystemClock::time_point(std::chrono::milliseconds(start_ms));
  const auto period = std::chrono::duration<double, std::milli>(o.period_ms);
  std::mt19937_64 rng(0x5EED0000u + static_cast<unsigned>(o.rank));
  std::uniform_real_distribution<double> jitter(0.0, o.jitter_ms);

  bool quit = false;
  std::uint64_t published = 0;
  double late_ms_max = 0.0;  // how far behind its clock this rank ran
  for (std::uint64_t v = 1; v <= o.versions && !quit; ++v) {
    while (auto line = in.read(std::chrono::milliseconds(0))) quit = quit || *line == "quit";
    if (quit || in.closed()) break;
    const auto due = start + std::chrono::duration_cast<SystemClock::duration>(
                                 period * static_cast<double>(v) + std::chrono::duration<double, std::milli>(
                                                                       o.jitter_ms > 0 ? jitter(rng) : 0.0));
    std::this_thread::sleep_until(due);
    late_ms_max =
        std::max(late_ms_max, std::chrono::duration<double, std::milli>(SystemClock::now() - due).count());
    auto writer = (*publisher)->begin_publish(v);
    if (!writer.ok())
      return std::fprintf(stderr, "trainer %d: %s\n", o.rank, writer.status().to_string().c_str()), 1;
    for (const Shard& shard : shards) {
      auto data = writer->tensor(shard.local_name);
      if (!data.ok())
        return std::fprintf(stderr, "trainer %d: %s\n", o.rank, data.status().to_string().c_str()), 1;
      fill(static_cast<std::uint32_t*>(*data), shard, v);
    }
    auto committed = writer->commit();
    if (!committed.ok()) {
      return std::fprintf(stderr, "trainer %d: %s\n", o.rank, committed.status().to_string().c_str()), 1;
    }
    published = v;
    if (v % o.print_every == 0 || v == 1 || v == o.versions) {
      std::printf("PUBLISHED %llu\n", static_cast<unsigned long long>(v));
      std::fflush(stdout);
    }
  }

  // Serve until "quit" or the end of stdin, so that generators can finish.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.linger_s);
  while (!quit && !in.closed() && std::chrono::steady_clock::now() < until) {
    auto line = in.read(std::chrono::milliseconds(100));
    quit = line && *line == "quit";
  }
  const auto stats = (*publisher)->stats();
  std::printf(
      "STATS rank=%d published=%llu leases_granted=%llu leases_revoked=%llu bytes_served=%llu "
      "late_ms_max=%.1f\n",
      o.rank, static_cast<unsigned long long>(published),
      static_cast<unsigned long long>(stats.leases_granted),
      static_cast<unsigned long long>(stats.leases_revoked),
      static_cast<unsigned long long>(stats.bytes_served), late_ms_max);
  std::fflush(stdout);
  return 0;
}

}  // namespace sharded
