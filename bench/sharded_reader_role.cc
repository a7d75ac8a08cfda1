// The sharded-reader process of `weightsync-bench sharded` (protocol in
// sharded.h): one engine rank (a SubscriberGroup over every trainer rank, its
// TP slices bound through a RoutingPlan) or the single-publisher baseline (one
// Subscriber, one contiguous destination), pulling exactly the versions it is
// told and checking their bytes.
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "line_stream.h"
#include "role_loop.h"
#include "role_support.h"
#include "sharded.h"
#include "weightsync/weightsync.h"

namespace wsbench {
namespace {

// What this reader holds of matrix `matrix`: the block [s0, s0 + n0) x
// [s1, s1 + n1), row-major at `data` (rows of n1 elements).
struct Block {
  int matrix = 0;
  std::int64_t s0 = 0, s1 = 0, n0 = 0, n1 = 0;
  std::uint32_t* data = nullptr;
};

// A block of a matrix `width` elements wide checked against version v's
// pattern (`base`: its first element's): every row (full), or (sample) the
// first, the last and about 32 more spread over the block, shifted by the
// version so that successive runs look at other rows. Returns the bytes
// checked, or sets *error at the first wrong element.
std::uint64_t check_block(const Block& b, std::int64_t width, std::uint32_t base, bool full, std::uint64_t v,
                          const std::string& what, std::string* error) {
  const std::int64_t s0 = b.s0, s1 = b.s1, n0 = b.n0, n1 = b.n1;
  const std::uint32_t* data = b.data;
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

bool fail(std::string* error, const std::string& what) {
  *error = what;
  return false;
}

// What one pull delivered, from either kind of reader.
struct Delivered {
  std::uint64_t version = 0, bytes = 0;
  bool checksums = false;
  std::vector<std::string> member_s;  // seconds per member (one for the single reader)
};

// How run_sharded_reader was started (sharded.h).
struct ReaderSpec {
  int ranks = 1, readers = 1, rank = 0;
  std::vector<std::string> addresses;
  std::string transport;
  bool single = false;
  bool full = false;  // --verify full: every row checked
};

// One reader: set up once (setup()), then PULL commands on the role loop's thread.
class ShardedReader {
 public:
  ShardedReader(const ShardedModel& model, ReaderSpec spec) : model_(model), spec_(std::move(spec)) {}

  bool setup(std::string* error) {
    if (!allocate(error)) return false;
    return spec_.single ? connect_single(error) : connect_group(error);
  }
  // READY's fields: <transport> <bytes> <pieces per member>
  std::string ready_fields() const {
    return spec_.transport + " " + std::to_string(bytes_) + " " + join(pieces_);
  }

  // PULL <v> -> HELD <v> <pull_s> <end_ns> <bytes> <checked_bytes> <cpu_s> <checksums> <member seconds>
  std::string pull(std::istringstream& in) {
    std::uint64_t version = 0;
    in >> version;
    const double cpu_before = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    Delivered got;
    const weightsync::Status failed = spec_.single ? pull_single(version, &got) : pull_group(version, &got);
    const auto end = std::chrono::steady_clock::now();
    const std::int64_t end_ns = monotonic_ns();
    const double cpu = process_cpu_seconds() - cpu_before;
    if (!failed.ok())
      return error_line("pull of version " + std::to_string(version) + ": " + failed.to_string());
    if (got.version != version || got.bytes != bytes_) {
      return error_line("pulled version " + std::to_string(got.version) + " (" + std::to_string(got.bytes) +
                        " bytes), expected " + std::to_string(version) + " (" + std::to_string(bytes_) + ")");
    }
    std::string wrong;
    const std::uint64_t checked = check_blocks(version, &wrong);
    if (!wrong.empty()) return error_line("wrong bytes: " + wrong);
    std::ostringstream out;
    out << "HELD " << got.version << " " << std::chrono::duration<double>(end - start).count() << " "
        << end_ns << " " << got.bytes << " " << checked << " " << cpu << " " << (got.checksums ? 1 : 0) << " "
        << join(got.member_s);
    return out.str();
  }

 private:
  weightsync::SubscriberOptions options() const {
    weightsync::SubscriberOptions options;
    options.transport = spec_.transport;
    options.client_name = "sharded-reader" + std::to_string(spec_.rank);
    return options;
  }

  // What this reader holds, one block per matrix (the whole matrix for the
  // single reader), packed in matrix order in one pre-faulted buffer.
  bool allocate(std::string* error) {
    if (!spec_.single) {
      target_ = model_.target(spec_.readers);
      for (const auto& dest : target_.ranks[static_cast<std::size_t>(spec_.rank)]) bytes_ += dest.bytes();
    } else {
      bytes_ = model_.total_bytes;
    }
    auto buffer = weightsync::HostBuffer::allocate(bytes_);
    if (!buffer.ok()) return fail(error, "destination: " + buffer.status().to_string());
    buffer_ = std::move(*buffer);
    std::memset(buffer_.data(), 0, bytes_);  // fault it in before measuring
    return true;
  }

  // The single-publisher baseline: one Subscriber, the whole model contiguous, prepared once.
  bool connect_single(std::string* error) {
    auto* base = static_cast<char*>(buffer_.data());
    auto sub = weightsync::Subscriber::connect(spec_.addresses.at(0), options());
    if (!sub.ok()) return fail(error, "connect over " + spec_.transport + ": " + sub.status().to_string());
    subscriber_ = std::move(*sub);
    const auto& layout = subscriber_->layout();
    if (layout.total_bytes() != bytes_ || layout.payload_bytes() != bytes_) {
      return fail(error, "the whole-model publisher serves " + std::to_string(layout.total_bytes()) +
                             " bytes, not " + std::to_string(bytes_));
    }
    for (int m = 0; m < model_.matrices; ++m) {
      const auto* entry = layout.find(model_.name(m));
      if (entry == nullptr) return fail(error, "no tensor " + model_.name(m));
      blocks_.push_back(Block{m, 0, 0, model_.rows(), model_.width,
                              reinterpret_cast<std::uint32_t*>(base + entry->offset)});
    }
    auto plan = subscriber_->prepare(weightsync::Destination::contiguous(base, bytes_));
    if (!plan.ok()) return fail(error, "prepare: " + plan.status().to_string());
    single_plan_ = *plan;
    pieces_.push_back(std::to_string(single_plan_.pieces()));
    if (subscriber_->transport() != spec_.transport) {
      return fail(error, "connected over " + subscriber_->transport() + ", not " + spec_.transport);
    }
    return true;
  }

  // One engine rank: its TP slices bound through a RoutingPlan, a SubscriberGroup over every trainer rank.
  bool connect_group(std::string* error) {
    auto plan = weightsync::RoutingPlan::compute(model_.source(spec_.ranks), target_);
    if (!plan.ok()) return fail(error, "routing plan: " + plan.status().to_string());
    auto destinations = plan->bind(static_cast<std::size_t>(spec_.rank), place_blocks());
    if (!destinations.ok()) return fail(error, "bind: " + destinations.status().to_string());
    auto connected = weightsync::SubscriberGroup::connect(spec_.addresses, options());
    if (!connected.ok()) {
      return fail(error, "connect over " + spec_.transport + ": " + connected.status().to_string());
    }
    group_ = std::move(*connected);
    for (std::size_t r = 0; r < group_->size(); ++r) {
      if (group_->member(r).transport() != spec_.transport) {
        return fail(error, "trainer rank " + std::to_string(r) + " connected over " +
                               group_->member(r).transport() + ", not " + spec_.transport);
      }
    }
    auto prepared = group_->prepare(*destinations);
    if (!prepared.ok()) return fail(error, "prepare: " + prepared.status().to_string());
    plans_ = std::move(*prepared);
    return check_plans(error);
  }

  // This engine rank's tensors, packed in the buffer in target order: the blocks, and where each tensor
  // lands.
  std::unordered_map<std::string, void*> place_blocks() {
    auto* base = static_cast<char*>(buffer_.data());
    std::unordered_map<std::string, void*> buffers;
    std::uint64_t offset = 0;
    for (const auto& dest : target_.ranks[static_cast<std::size_t>(spec_.rank)]) {
      buffers[dest.name] = base + offset;
      const auto& piece = dest.pieces.at(0);
      int m = 0;
      while (m < model_.matrices && model_.name(m) != dest.name) ++m;
      blocks_.push_back(Block{m, piece.from.start[0], piece.from.start[1], piece.from.size[0],
                              piece.from.size[1], reinterpret_cast<std::uint32_t*>(base + offset)});
      offset += dest.bytes();
    }
    return buffers;
  }

  // The prepared plans move exactly the bytes this engine rank holds; pieces_: theirs, per member.
  bool check_plans(std::string* error) {
    std::uint64_t planned = 0;
    for (const auto& p : plans_) {
      pieces_.push_back(std::to_string(p.valid() ? p.pieces() : 0));
      planned += p.valid() ? p.bytes() : 0;
    }
    if (planned != bytes_) {
      return fail(error, "the plan moves " + std::to_string(planned) + " bytes, not the " +
                             std::to_string(bytes_) + " this engine rank holds");
    }
    return true;
  }

  weightsync::Status pull_single(std::uint64_t version, Delivered* got) {
    weightsync::PullOptions pull_options;
    pull_options.version = version;
    pull_options.wait = std::chrono::milliseconds(10000);
    auto pulled = subscriber_->pull(single_plan_, pull_options);
    if (!pulled.ok()) return pulled.status();
    got->version = pulled->version;
    got->bytes = pulled->bytes;
    got->checksums = pulled->checksum_verified;
    got->member_s.push_back(std::to_string(pulled->seconds));
    return weightsync::Status();
  }

  weightsync::Status pull_group(std::uint64_t version, Delivered* got) {
    weightsync::GroupPullOptions pull_options;
    pull_options.version = version;
    pull_options.wait = std::chrono::milliseconds(10000);
    auto pulled = group_->pull(plans_, pull_options);
    if (!pulled.ok()) return pulled.status();
    got->version = pulled->version;
    got->bytes = pulled->bytes;
    got->checksums = pulled->checksums_verified;
    for (const auto& member : pulled->members) got->member_s.push_back(std::to_string(member.seconds));
    return weightsync::Status();
  }

  // Every block against version v's pattern; the bytes checked, or *wrong set.
  std::uint64_t check_blocks(std::uint64_t version, std::string* wrong) const {
    std::uint64_t checked = 0;
    for (const Block& b : blocks_) {
      checked += check_block(b, model_.width, pattern_base(version, b.matrix), spec_.full, version,
                             model_.name(b.matrix), wrong);
      if (!wrong->empty()) break;
    }
    return checked;
  }

  const ShardedModel& model_;
  const ReaderSpec spec_;
  weightsync::ShardedTarget target_;  // engine ranks' tensors (not the single reader)
  std::uint64_t bytes_ = 0;           // this reader's share of the model
  weightsync::HostBuffer buffer_;
  std::vector<Block> blocks_;
  std::vector<std::string> pieces_;                     // READY's pieces per member
  std::unique_ptr<weightsync::Subscriber> subscriber_;  // single
  weightsync::PullPlan single_plan_;
  std::unique_ptr<weightsync::SubscriberGroup> group_;  // engine rank
  std::vector<weightsync::PullPlan> plans_;
};

}  // namespace

int run_sharded_reader(const ShardedModel& model, int ranks, int readers, int rank,
                       const std::vector<std::string>& addresses, const std::string& transport, bool single,
                       const std::string& verify) {
  wsutil::LineStream io(0, 1);
  ShardedReader reader(model,
                       ReaderSpec{ranks, readers, rank, addresses, transport, single, verify == "full"});
  std::string error;
  if (!reader.setup(&error)) return startup_error(io, error);
  RoleLoop loop(io);
  loop.on("PULL", [&](std::istringstream& in) { return reader.pull(in); });
  return loop.ready_then_run(reader.ready_fields());
}

}  // namespace wsbench
