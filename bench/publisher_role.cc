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

}  // namespace

int run_publisher_role(wsutil::LineStream& io, const PublisherRoleConfig& config) {
  Cell cell;
  std::unique_ptr<ComputeLoop> compute;
  for (;;) {
    auto line = io.read_line(std::chrono::hours(24));
    if (!line) return 0;  // the orchestrator is gone
    std::istringstream in(*line);
    std::string command;
    in >> command;
    std::string reply;
    if (command == "SETUP") {
      std::uint64_t size = 0;
      in >> size;
      cell.publisher.reset();  // first: it may read the device source until it is gone
      cell = Cell{};
      bool cuda_source = false, cuda_slots = false;
      std::string error;
      if (!parse_memory(in, &cuda_source, &error) || !parse_memory(in, &cuda_slots, &error)) {
        reply = error_line(error);
      } else {
        auto layout = weightsync::WeightLayout::build(
            {weightsync::TensorSpec{"image", weightsync::DType::kUInt8, {static_cast<std::int64_t>(size)}}});
        weightsync::PublisherOptions options;
        options.bind_address = config.bind;
        options.slots = config.slots;
        if (cuda_slots) options.slot_memory = weightsync::MemoryKind::kCuda;
        auto publisher = layout.ok()
                             ? weightsync::Publisher::create(std::move(*layout), options)
                             : weightsync::Result<std::unique_ptr<weightsync::Publisher>>(layout.status());
        // The source: a device image (filled with 0x5a), or a host one (below).
        const bool have_source =
            !cuda_source || DeviceBuffer::allocate(size, 0x5a, &cell.device_source, &error);
        auto source = weightsync::HostBuffer::allocate(cuda_source ? 4096 : size);
        if (!publisher.ok()) {
          reply = error_line("publisher: " + publisher.status().to_string());
        } else if (!have_source) {
          reply = error_line("device source: " + error);
        } else if (!source.ok()) {
          reply = error_line("source buffer: " + source.status().to_string());
        } else {
          cell.publisher = std::move(*publisher);
          cell.source = std::move(*source);
          cell.size = size;
          // Fault the host source in and give it non-zero content.
          if (!cuda_source) std::memset(cell.source.data(), 0x5a, size);
          reply = "READY " + cell.publisher->address() + " " + cell.publisher->slot_allocator();
        }
      }
    } else if (command == "PUBLISH") {
      std::uint64_t version = 0;
      in >> version;
      if (!cell.publisher) {
        reply = error_line("PUBLISH before SETUP");
      } else {
        double copy_s = 0;
        std::string error;
        bool ok = false;
        if (cell.device_source.data() != nullptr) {
          ok = publish_from_device(cell, version, &copy_s, &error);
        } else {
          mark_image(cell.source.data(), cell.size, version);
          auto published = cell.publisher->publish(version, cell.source.data(), cell.size);
          ok = published.ok();
          if (ok) copy_s = published->copy_seconds;
          if (!ok) error = "publish: " + published.status().to_string();
        }
        cell.commit_ns = monotonic_ns();
        cell.cpu_at_commit = process_cpu_seconds();
        cell.compute_cpu_at_commit = compute ? compute->cpu_seconds() : 0.0;
        cell.passes_at_commit = compute ? compute->passes() : 0;
        if (!ok) {
          reply = error_line(error);
        } else {
          std::ostringstream out;
          out << "COMMITTED " << version << " " << copy_s << " " << cell.commit_ns;
          reply = out.str();
        }
      }
    } else if (command == "SERVED") {
      const double cpu = process_cpu_seconds() - cell.cpu_at_commit;
      const double compute_cpu = compute ? compute->cpu_seconds() - cell.compute_cpu_at_commit : 0.0;
      const double seconds = static_cast<double>(monotonic_ns() - cell.commit_ns) * 1e-9;
      const double rate = compute && seconds > 0
                              ? static_cast<double>(compute->passes() - cell.passes_at_commit) / seconds
                              : 0.0;
      std::ostringstream out;
      out << "SERVED " << std::max(0.0, cpu - compute_cpu) << " " << rate << " " << seconds;
      reply = out.str();
    } else if (command == "COMPUTE") {
      std::string state;
      in >> state;
      if (state == "ON") {
        compute = std::make_unique<ComputeLoop>();
        const std::uint64_t before = compute->passes();
        const auto start = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::ostringstream out;
        out << "COMPUTE " << static_cast<double>(compute->passes() - before) / seconds;
        reply = out.str();
      } else {
        compute.reset();
        reply = "COMPUTE OFF";
      }
    } else if (command == "IDLE") {
      double seconds = 0;
      in >> seconds;
      if (!compute) {
        reply = error_line("IDLE needs COMPUTE ON");
      } else {
        const std::uint64_t before = compute->passes();
        const auto start = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(std::max(seconds, 0.02), 10.0)));
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::ostringstream out;
        out << "IDLE " << static_cast<double>(compute->passes() - before) / elapsed;
        reply = out.str();
      }
    } else if (command == "TEARDOWN") {
      compute.reset();
      cell.publisher.reset();
      cell = Cell{};
      reply = "TEARDOWN";
    } else if (command == "QUIT") {
      return 0;
    } else {
      reply = error_line("unknown command '" + command + "'");
    }
    if (!io.write_line(reply)) return 1;
  }
}

}  // namespace wsbench
