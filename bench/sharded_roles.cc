// The processes of `weightsync-bench sharded` (protocol in sharded.h): a
// publisher holding one trainer rank's shards (or the whole model), and a
// reader that is one engine rank (a SubscriberGroup over every trainer rank,
// its TP slices bound through a RoutingPlan) or the single-publisher
// baseline (one Subscriber, one contiguous destination).
#include <chrono>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "line_stream.h"
#include "role_support.h"
#include "sharded.h"
#include "weightsync/weightsync.h"

namespace wsbench {
namespace {

// dst[i] = first + i (mod 2^32): one contiguous run of the pattern.
void fill_run(std::uint32_t* dst, std::uint64_t n, std::uint32_t first) {
  for (std::uint64_t i = 0; i < n; ++i) dst[i] = first + static_cast<std::uint32_t>(i);
}

// A block [s0, s0 + n0) x [s1, s1 + n1) of matrix m held row-major at `data`
// (rows of n1 elements), checked against version v's pattern: every row
// (full), or (sample) the first, the last and about 32 more spread over the
// block, shifted by the version so that successive runs look at other rows.
// Returns the bytes checked, or sets *error at the first wrong element.
std::uint64_t check_block(const std::uint32_t* data, std::int64_t s0, std::int64_t s1, std::int64_t n0,
                          std::int64_t n1, std::int64_t width, std::uint32_t base, bool full, std::uint64_t v,
                          const std::string& what, std::string* error) {
  const std::int64_t step = full ? 1 : std::max<std::int64_t>(1, n0 / 32);
  const std::int64_t shift = full ? 0 : static_cast<std::int64_t>(v % static_cast<std::uint64_t>(step));
  std::uint64_t checked = 0;
  auto check_row = [&](std::int64_t i) {
    const std::uint32_t* row = data + i * n1;
    const std::uint32_t first = base + static_cast<std::uint32_t>((s0 + i) * width + s1);
    for (std::int64_t j = 0; j < n1; ++j) {
      if (row[j] != first + static_cast<std::uint32_t>(j)) {
        *error = what + ": element (" + std::to_string(i) + ", " + std::to_string(j) + ") of the block at (" +
                 std::to_string(s0) + ", " + std::to_string(s1) + ") is wrong for version " +
                 std::to_string(v);
        return false;
      }
    }
    checked += static_cast<std::uint64_t>(n1) * sizeof(std::uint32_t);
    return true;
  };
  if (!check_row(0) || (n0 > 1 && !check_row(n0 - 1))) return checked;
  for (std::int64_t i = shift; i < n0 - 1; i += step) {
    if (i == 0) continue;
    if (!check_row(i)) return checked;
  }
  return checked;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out.empty() ? "-" : out;
}

}  // namespace

int run_sharded_publisher(const ShardedModel& model, int ranks, int rank, bool checksum) {
  wsutil::LineStream io(0, 1);
  const weightsync::ShardedSource source = model.source(ranks);
  auto layout = source.rank_layout(static_cast<std::size_t>(rank));
  if (!layout.ok()) return io.write_line(error_line("layout: " + layout.status().to_string())), 1;
  weightsync::PublisherOptions options;
  options.slots = 3;
  options.checksum = checksum;
  options.slot_allocator = "memfd";  // the shm transport reads memfd slots
  auto publisher = weightsync::Publisher::create(*layout, options);
  if (!publisher.ok()) return io.write_line(error_line("publisher: " + publisher.status().to_string())), 1;
  // Where each tensor of this rank starts in the global matrix (a dim-0 block).
  const auto& shards = source.ranks[static_cast<std::size_t>(rank)];
  const std::int64_t rows_per_rank = model.rows() / ranks;
  if (!io.write_line("READY " + (*publisher)->address() + " " + std::to_string(layout->total_bytes())))
    return 1;
  for (;;) {
    auto line = io.read_line(std::chrono::hours(24));
    if (!line) return 0;
    std::istringstream in(*line);
    std::string command;
    in >> command;
    std::string reply;
    if (command == "PUBLISH") {
      std::uint64_t version = 0;
      in >> version;
      const auto start = std::chrono::steady_clock::now();
      auto writer = (*publisher)->begin_publish(version);
      weightsync::Status published = writer.status();
      if (writer.ok()) {
        for (std::size_t k = 0; k < shards.size(); ++k) {
          auto at = writer->tensor(shards[k].local_name);
          if (!at.ok()) {
            published = at.status();
            break;
          }
          const auto m = static_cast<int>(k);
          const std::uint64_t elements = static_cast<std::uint64_t>(rows_per_rank * model.width);
          const auto first_row = static_cast<std::uint64_t>(rank * rows_per_rank);
          fill_run(static_cast<std::uint32_t*>(*at), elements,
                   pattern_base(version, m) + static_cast<std::uint32_t>(first_row * model.width));
        }
        if (published.ok()) published = writer->commit().status();
      }
      const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      reply = published.ok() ? "COMMITTED " + std::to_string(version) + " " + std::to_string(fill_s)
                             : error_line("publish: " + published.to_string());
    } else if (command == "QUIT") {
      return 0;
    } else {
      reply = error_line("unknown command '" + command + "'");
    }
    if (!io.write_line(reply)) return 1;
  }
}

int run_sharded_reader(const ShardedModel& model, int ranks, int readers, int rank,
                       const std::vector<std::string>& addresses, const std::string& transport, bool single,
                       const std::string& verify) {
  wsutil::LineStream io(0, 1);
  const bool full = verify == "full";
  weightsync::SubscriberOptions options;
  options.transport = transport;
  options.client_name = "sharded-reader" + std::to_string(rank);

  // What this reader holds: one block per matrix (the whole matrix for the
  // single reader), packed in matrix order in one pre-faulted buffer.
  struct Block {
    int matrix = 0;
    std::int64_t s0 = 0, s1 = 0, n0 = 0, n1 = 0;
    std::uint32_t* data = nullptr;
  };
  std::vector<Block> blocks;
  std::uint64_t bytes = 0;
  weightsync::ShardedTarget target;
  if (!single) {
    target = model.target(readers);
    for (const auto& dest : target.ranks[static_cast<std::size_t>(rank)]) bytes += dest.bytes();
  } else {
    bytes = model.total_bytes;
  }
  auto buffer = weightsync::HostBuffer::allocate(bytes);
  if (!buffer.ok()) return io.write_line(error_line("destination: " + buffer.status().to_string())), 1;
  std::memset(buffer->data(), 0, bytes);  // fault it in before measuring
  auto* base = static_cast<char*>(buffer->data());

  std::unique_ptr<weightsync::SubscriberGroup> group;
  std::unique_ptr<weightsync::Subscriber> subscriber;
  std::vector<weightsync::PullPlan> plans;
  weightsync::PullPlan single_plan;
  std::vector<std::string> pieces;
  if (single) {
    auto sub = weightsync::Subscriber::connect(addresses.at(0), options);
    if (!sub.ok())
      return io.write_line(error_line("connect over " + transport + ": " + sub.status().to_string())), 1;
    subscriber = std::move(*sub);
    const auto& layout = subscriber->layout();
    if (layout.total_bytes() != bytes || layout.payload_bytes() != bytes) {
      return io.write_line(error_line("the whole-model publisher serves " +
                                      std::to_string(layout.total_bytes()) + " bytes, not " +
                                      std::to_string(bytes))),
             1;
    }
    for (int m = 0; m < model.matrices; ++m) {
      const auto* entry = layout.find(model.name(m));
      if (entry == nullptr) return io.write_line(error_line("no tensor " + model.name(m))), 1;
      blocks.push_back(
          Block{m, 0, 0, model.rows(), model.width, reinterpret_cast<std::uint32_t*>(base + entry->offset)});
    }
    auto plan = subscriber->prepare(weightsync::Destination::contiguous(base, bytes));
    if (!plan.ok()) return io.write_line(error_line("prepare: " + plan.status().to_string())), 1;
    single_plan = *plan;
    pieces.push_back(std::to_string(single_plan.pieces()));
    if (subscriber->transport() != transport) {
      return io.write_line(error_line("connected over " + subscriber->transport() + ", not " + transport)), 1;
    }
  } else {
    auto plan = weightsync::RoutingPlan::compute(model.source(ranks), target);
    if (!plan.ok()) return io.write_line(error_line("routing plan: " + plan.status().to_string())), 1;
    std::unordered_map<std::string, void*> buffers;
    std::uint64_t offset = 0;
    for (const auto& dest : target.ranks[static_cast<std::size_t>(rank)]) {
      buffers[dest.name] = base + offset;
      const auto& piece = dest.pieces.at(0);
      int m = 0;
      while (m < model.matrices && model.name(m) != dest.name) ++m;
      blocks.push_back(Block{m, piece.from.start[0], piece.from.start[1], piece.from.size[0],
                             piece.from.size[1], reinterpret_cast<std::uint32_t*>(base + offset)});
      offset += dest.bytes();
    }
    auto destinations = plan->bind(static_cast<std::size_t>(rank), buffers);
    if (!destinations.ok()) return io.write_line(error_line("bind: " + destinations.status().to_string())), 1;
    auto connected = weightsync::SubscriberGroup::connect(addresses, options);
    if (!connected.ok()) {
      return io.write_line(error_line("connect over " + transport + ": " + connected.status().to_string())),
             1;
    }
    group = std::move(*connected);
    for (std::size_t r = 0; r < group->size(); ++r) {
      if (group->member(r).transport() != transport) {
        return io.write_line(error_line("trainer rank " + std::to_string(r) + " connected over " +
                                        group->member(r).transport() + ", not " + transport)),
               1;
      }
    }
    auto prepared = group->prepare(*destinations);
    if (!prepared.ok()) return io.write_line(error_line("prepare: " + prepared.status().to_string())), 1;
    plans = std::move(*prepared);
    std::uint64_t planned = 0;
    for (const auto& p : plans) {
      pieces.push_back(std::to_string(p.valid() ? p.pieces() : 0));
      planned += p.valid() ? p.bytes() : 0;
    }
    if (planned != bytes) {
      return io.write_line(error_line("the plan moves " + std::to_string(planned) + " bytes, not the " +
                                      std::to_string(bytes) + " this engine rank holds")),
             1;
    }
  }
  if (!io.write_line("READY " + transport + " " + std::to_string(bytes) + " " + join(pieces))) return 1;

  for (;;) {
    auto line = io.read_line(std::chrono::hours(24));
    if (!line) return 0;
    std::istringstream in(*line);
    std::string command;
    in >> command;
    std::string reply;
    if (command == "PULL") {
      std::uint64_t version = 0;
      in >> version;
      const double cpu_before = process_cpu_seconds();
      const auto start = std::chrono::steady_clock::now();
      std::uint64_t got = 0, moved = 0;
      bool checksums = false;
      std::vector<std::string> member_s;
      weightsync::Status failed;
      if (single) {
        weightsync::PullOptions pull_options;
        pull_options.version = version;
        pull_options.wait = std::chrono::milliseconds(10000);
        auto pulled = subscriber->pull(single_plan, pull_options);
        if (pulled.ok()) {
          got = pulled->version;
          moved = pulled->bytes;
          checksums = pulled->checksum_verified;
          member_s.push_back(std::to_string(pulled->seconds));
        } else {
          failed = pulled.status();
        }
      } else {
        weightsync::GroupPullOptions pull_options;
        pull_options.version = version;
        pull_options.wait = std::chrono::milliseconds(10000);
        auto pulled = group->pull(plans, pull_options);
        if (pulled.ok()) {
          got = pulled->version;
          moved = pulled->bytes;
          checksums = pulled->checksums_verified;
          for (const auto& member : pulled->members) member_s.push_back(std::to_string(member.seconds));
        } else {
          failed = pulled.status();
        }
      }
      const auto end = std::chrono::steady_clock::now();
      const std::int64_t end_ns = monotonic_ns();
      const double cpu = process_cpu_seconds() - cpu_before;
      if (!failed.ok()) {
        reply = error_line("pull of version " + std::to_string(version) + ": " + failed.to_string());
      } else if (got != version || moved != bytes) {
        reply =
            error_line("pulled version " + std::to_string(got) + " (" + std::to_string(moved) +
                       " bytes), expected " + std::to_string(version) + " (" + std::to_string(bytes) + ")");
      } else {
        std::string wrong;
        std::uint64_t checked = 0;
        for (const Block& b : blocks) {
          checked += check_block(b.data, b.s0, b.s1, b.n0, b.n1, model.width, pattern_base(version, b.matrix),
                                 full, version, model.name(b.matrix), &wrong);
          if (!wrong.empty()) break;
        }
        if (!wrong.empty()) {
          reply = error_line("wrong bytes: " + wrong);
        } else {
          std::ostringstream out;
          out << "HELD " << got << " " << std::chrono::duration<double>(end - start).count() << " " << end_ns
              << " " << moved << " " << checked << " " << cpu << " " << (checksums ? 1 : 0) << " "
              << join(member_s);
          reply = out.str();
        }
      }
    } else if (command == "QUIT") {
      return 0;
    } else {
      reply = error_line("unknown command '" + command + "'");
    }
    if (!io.write_line(reply)) return 1;
  }
}

}  // namespace wsbench
