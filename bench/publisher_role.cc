// The publisher side of a bench cell: a weightsync::Publisher serving one
// synthetic image (published from host memory, or from cudaMalloc memory for
// the GPU rows), a compute loop standing in for the trainer's work, and the
// CPU accounting of the serving side (process CPU minus the compute loop).
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "cuda_limits.h"
#include "role_loop.h"
#include "role_support.h"
#include "roles.h"
#include "weightsync/weightsync.h"

namespace wsbench {
namespace {

// A cache-resident floating-point loop: the trainer's compute, which readers
// should not slow down. passes() counts completed passes.
class ComputeLoop {
 public:
  ComputeLoop() {
    thread_ = std::thread([this] { run(); });
    // The thread's CPU clock, to subtract its time from the process's.
    while (!ready_.load()) std::this_thread::yield();
  }
  ~ComputeLoop() {
    stop_ = true;
    thread_.join();
  }
  std::uint64_t passes() const { return passes_.load(std::memory_order_relaxed); }
  double cpu_seconds() const {
    timespec ts{};
    ::clock_gettime(clock_, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }

 private:
  void run() {
    ::pthread_getcpuclockid(::pthread_self(), &clock_);
    ready_ = true;
    std::vector<float> a(8192, 1.0f), b(8192, 0.5f);
    while (!stop_.load(std::memory_order_relaxed)) {
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = a[i] * 0.999f + b[i];
      passes_.fetch_add(1, std::memory_order_relaxed);
    }
    sink_ = a[0];
  }
  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> passes_{0};
  clockid_t clock_{};
  volatile float sink_ = 0;
  std::thread thread_;
};

struct Cell {
  // Declared first, destroyed last: the publisher may read it until it is gone.
  DeviceBuffer device_source;  // SETUP ... cuda: the image lives here instead of `source`
  std::unique_ptr<weightsync::Publisher> publisher;
  weightsync::HostBuffer source;
  std::uint64_t size = 0;
  // Snapshot at the last commit.
  double cpu_at_commit = 0, compute_cpu_at_commit = 0;
  std::uint64_t passes_at_commit = 0;
  std::int64_t commit_ns = 0;
};

// The SETUP line's optional words: "host" (the default) or "cuda".
bool parse_memory(std::istringstream& in, bool* cuda, std::string* error) {
  std::string word;
  if (!(in >> word) || word == "host") {
    *cuda = false;
    return true;
  }
  if (word == "cuda") {
    *cuda = true;
    return true;
  }
  *error = "SETUP: memory must be host or cuda, not '" + word + "'";
  return false;
}

// publish_from_device() from the cell's device image, then its commit.
// Returns the copy time (enqueue to commit) or an ERROR reply in *error.
bool publish_from_device(Cell& cell, std::uint64_t version, double* copy_s, std::string* error) {
  std::uint64_t head = 0, tail = 0;
  image_marks(version, &head, &tail);
  if (!cell.device_source.write(0, &head, sizeof(head), error) ||
      !cell.device_source.write(cell.size - sizeof(tail), &tail, sizeof(tail), error)) {
    *error = "marking the device image: " + *error;
    return false;
  }
  auto ticket = cell.publisher->publish_from_device(version, cell.device_source.data(), cell.size);
  if (!ticket.ok()) {
    *error = "publish_from_device: " + ticket.status().to_string();
    return false;
  }
  auto committed = cell.publisher->flush_device_publishes(std::chrono::seconds(60));
  if (!committed.ok()) {
    *error = "flush_device_publishes: " + committed.status().to_string();
    return false;
  }
  *copy_s = committed->copy_seconds;
  return true;
}

// publish() from the cell's host image, marked for `version` first.
bool publish_from_host(Cell& cell, std::uint64_t version, double* copy_s, std::string* error) {
  mark_image(cell.source.data(), cell.size, version);
  auto published = cell.publisher->publish(version, cell.source.data(), cell.size);
  if (!published.ok()) {
    *error = "publish: " + published.status().to_string();
    return false;
  }
  *copy_s = published->copy_seconds;
  return true;
}

// The compute loop's passes per second while this thread sleeps `seconds`.
double passes_per_second(const ComputeLoop& compute, double seconds) {
  const std::uint64_t before = compute.passes();
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(compute.passes() - before) / elapsed;
}

// The commands of the publisher role (roles.h), one method each, on the role loop's thread.
class PublisherRole {
 public:
  explicit PublisherRole(const PublisherRoleConfig& config) : config_(config) {}

  void register_commands(RoleLoop& loop) {
    loop.on("SETUP", [this](std::istringstream& in) { return setup(in); });
    loop.on("PUBLISH", [this](std::istringstream& in) { return publish(in); });
    loop.on("SERVED", [this](std::istringstream&) { return served(); });
    loop.on("COMPUTE", [this](std::istringstream& in) { return set_compute(in); });
    loop.on("IDLE", [this](std::istringstream& in) { return idle(in); });
    loop.on("TEARDOWN", [this](std::istringstream&) { return teardown(); });
  }

 private:
  // SETUP <size_bytes> [<source> <slots>] -> READY <address> <slot_allocator>
  std::string setup(std::istringstream& in) {
    std::uint64_t size = 0;
    in >> size;
    cell_.publisher.reset();  // first: it may read the device source until it is gone
    cell_ = Cell{};
    bool cuda_source = false, cuda_slots = false;
    std::string error;
    if (!parse_memory(in, &cuda_source, &error) || !parse_memory(in, &cuda_slots, &error)) {
      return error_line(error);
    }
    auto publisher = create_publisher(size, cuda_slots);
    // The source: a device image (filled with 0x5a), or a host one (below).
    const bool have_source = !cuda_source || DeviceBuffer::allocate(size, 0x5a, &cell_.device_source, &error);
    auto source = weightsync::HostBuffer::allocate(cuda_source ? 4096 : size);
    if (!publisher.ok()) return error_line("publisher: " + publisher.status().to_string());
    if (!have_source) return error_line("device source: " + error);
    if (!source.ok()) return error_line("source buffer: " + source.status().to_string());
    cell_.publisher = std::move(*publisher);
    cell_.source = std::move(*source);
    cell_.size = size;
    // Fault the host source in and give it non-zero content.
    if (!cuda_source) std::memset(cell_.source.data(), 0x5a, size);
    return "READY " + cell_.publisher->address() + " " + cell_.publisher->slot_allocator();
  }

  // A Publisher of one `size`-byte tensor on the configured address and slots.
  weightsync::Result<std::unique_ptr<weightsync::Publisher>> create_publisher(std::uint64_t size,
                                                                              bool cuda_slots) const {
    auto layout = weightsync::WeightLayout::build(
        {weightsync::TensorSpec{"image", weightsync::DType::kUInt8, {static_cast<std::int64_t>(size)}}});
    if (!layout.ok()) return layout.status();
    weightsync::PublisherOptions options;
    options.bind_address = config_.bind;
    options.slots = config_.slots;
    if (cuda_slots) options.slot_memory = weightsync::MemoryKind::kCuda;
    return weightsync::Publisher::create(std::move(*layout), options);
  }

  // PUBLISH <v> -> COMMITTED <v> <copy_s> <commit_ns>
  std::string publish(std::istringstream& in) {
    std::uint64_t version = 0;
    in >> version;
    if (!cell_.publisher) return error_line("PUBLISH before SETUP");
    double copy_s = 0;
    std::string error;
    const bool ok = cell_.device_source.data() != nullptr
                        ? publish_from_device(cell_, version, &copy_s, &error)
                        : publish_from_host(cell_, version, &copy_s, &error);
    cell_.commit_ns = monotonic_ns();
    cell_.cpu_at_commit = process_cpu_seconds();
    cell_.compute_cpu_at_commit = compute_ ? compute_->cpu_seconds() : 0.0;
    cell_.passes_at_commit = compute_ ? compute_->passes() : 0;
    if (!ok) return error_line(error);
    std::ostringstream out;
    out << "COMMITTED " << version << " " << copy_s << " " << cell_.commit_ns;
    return out.str();
  }

  // SERVED -> SERVED <cpu_s> <compute_rate> <window_s>
  std::string served() const {
    const double cpu = process_cpu_seconds() - cell_.cpu_at_commit;
    const double compute_cpu = compute_ ? compute_->cpu_seconds() - cell_.compute_cpu_at_commit : 0.0;
    const double seconds = static_cast<double>(monotonic_ns() - cell_.commit_ns) * 1e-9;
    const double rate = compute_ && seconds > 0
                            ? static_cast<double>(compute_->passes() - cell_.passes_at_commit) / seconds
                            : 0.0;
    std::ostringstream out;
    out << "SERVED " << std::max(0.0, cpu - compute_cpu) << " " << rate << " " << seconds;
    return out.str();
  }

  // COMPUTE ON -> COMPUTE <idle_rate>;  COMPUTE OFF -> COMPUTE OFF
  std::string set_compute(std::istringstream& in) {
    std::string state;
    in >> state;
    if (state != "ON") {
      compute_.reset();
      return "COMPUTE OFF";
    }
    compute_ = std::make_unique<ComputeLoop>();
    std::ostringstream out;
    out << "COMPUTE " << passes_per_second(*compute_, 0.3);
    return out.str();
  }

  // IDLE <seconds> -> IDLE <compute_rate>
  std::string idle(std::istringstream& in) const {
    double seconds = 0;
    in >> seconds;
    if (!compute_) return error_line("IDLE needs COMPUTE ON");
    std::ostringstream out;
    out << "IDLE " << passes_per_second(*compute_, std::min(std::max(seconds, 0.02), 10.0));
    return out.str();
  }

  // TEARDOWN -> TEARDOWN
  std::string teardown() {
    compute_.reset();
    cell_.publisher.reset();
    cell_ = Cell{};
    return "TEARDOWN";
  }

  const PublisherRoleConfig config_;
  Cell cell_;
  std::unique_ptr<ComputeLoop> compute_;
};

}  // namespace

int run_publisher_role(wsutil::LineStream& io, const PublisherRoleConfig& config) {
  PublisherRole role(config);
  RoleLoop loop(io);
  role.register_commands(loop);
  return loop.run();  // READY answers SETUP
}

}  // namespace wsbench
