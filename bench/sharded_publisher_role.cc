// The sharded-publisher process of `weightsync-bench sharded` (protocol in
// sharded.h): one trainer rank's shards (or, with R = 1, the whole model) in
// one Publisher, each version's pattern written into a slot in place.
#include <chrono>
#include <cstring>
#include <sstream>

#include "line_stream.h"
#include "role_loop.h"
#include "role_support.h"
#include "sharded.h"
#include "weightsync/weightsync.h"

namespace wsbench {
namespace {

// dst[i] = first + i (mod 2^32): one contiguous run of the pattern.
void fill_run(std::uint32_t* dst, std::uint64_t n, std::uint32_t first) {
  for (std::uint64_t i = 0; i < n; ++i) dst[i] = first + static_cast<std::uint32_t>(i);
}

// What trainer rank `rank` of `ranks` publishes: its shards, each the rank's dim-0 block of one matrix.
struct RankShards {
  const ShardedModel& model;
  const std::vector<weightsync::TrainerShard>& shards;
  int ranks = 1;
  int rank = 0;
};

// Writes version v's pattern into every shard of the open slot.
weightsync::Status fill_shards(weightsync::SlotWriter& writer, const RankShards& r, std::uint64_t version) {
  const std::int64_t rows_per_rank = r.model.rows() / r.ranks;
  for (std::size_t k = 0; k < r.shards.size(); ++k) {
    auto at = writer.tensor(r.shards[k].local_name);
    if (!at.ok()) return at.status();
    const auto m = static_cast<int>(k);
    const std::uint64_t elements = static_cast<std::uint64_t>(rows_per_rank * r.model.width);
    const auto first_row = static_cast<std::uint64_t>(r.rank * rows_per_rank);
    fill_run(static_cast<std::uint32_t*>(*at), elements,
             pattern_base(version, m) + static_cast<std::uint32_t>(first_row * r.model.width));
  }
  return weightsync::Status();
}

// PUBLISH <v> -> COMMITTED <v> <fill_s>
std::string publish(weightsync::Publisher& publisher, const RankShards& r, std::istringstream& in) {
  std::uint64_t version = 0;
  in >> version;
  const auto start = std::chrono::steady_clock::now();
  auto writer = publisher.begin_publish(version);
  weightsync::Status published = writer.status();
  if (writer.ok()) {
    published = fill_shards(*writer, r, version);
    if (published.ok()) published = writer->commit().status();
  }
  const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return published.ok() ? "COMMITTED " + std::to_string(version) + " " + std::to_string(fill_s)
                        : error_line("publish: " + published.to_string());
}

}  // namespace

int run_sharded_publisher(const ShardedModel& model, int ranks, int rank, bool checksum) {
  wsutil::LineStream io(0, 1);
  const weightsync::ShardedSource source = model.source(ranks);
  auto layout = source.rank_layout(static_cast<std::size_t>(rank));
  if (!layout.ok()) return startup_error(io, "layout: " + layout.status().to_string());
  weightsync::PublisherOptions options;
  options.slots = 3;
  options.checksum = checksum;
  options.slot_allocator = "memfd";  // the shm transport reads memfd slots
  auto publisher = weightsync::Publisher::create(*layout, options);
  if (!publisher.ok()) return startup_error(io, "publisher: " + publisher.status().to_string());
  const RankShards shards{model, source.ranks[static_cast<std::size_t>(rank)], ranks, rank};
  RoleLoop loop(io);
  loop.on("PUBLISH", [&](std::istringstream& in) { return publish(**publisher, shards, in); });
  return loop.ready_then_run((*publisher)->address() + " " + std::to_string(layout->total_bytes()));
}

}  // namespace wsbench
