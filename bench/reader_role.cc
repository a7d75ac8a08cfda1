// The reader side of a bench cell: one Subscriber pulling every version it is
// told about into a pre-faulted contiguous buffer (host memory, or cudaMalloc
// memory for the GPU rows), timing each pull and the process's CPU time
// around it.
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>

#include "cuda_limits.h"
#include "role_loop.h"
#include "role_support.h"
#include "roles.h"
#include "weightsync/weightsync.h"

namespace wsbench {
namespace {

// Whether the device image carries the marks of `version` (two 8-byte reads).
bool device_image_has_marks(const DeviceBuffer& image, std::uint64_t version, std::string* error) {
  std::uint64_t head = 0, tail = 0, want_head = 0, want_tail = 0;
  if (!image.read(0, &head, sizeof(head), error) ||
      !image.read(image.size() - sizeof(tail), &tail, sizeof(tail), error)) {
    return false;
  }
  image_marks(version, &want_head, &want_tail);
  if (head == want_head && tail == want_tail) return true;
  *error = "pulled version " + std::to_string(version) + " does not carry its marks: the bytes are wrong";
  return false;
}

// The reader role (roles.h): set up once, then PULL commands on the role loop's thread.
class ReaderRole {
 public:
  explicit ReaderRole(const ReaderRoleConfig& config)
      : config_(config), cuda_(config.destination == "cuda"), host_bytes_(cuda_ ? 4096 : config.size) {}
  ReaderRole(const ReaderRole&) = delete;
  ReaderRole& operator=(const ReaderRole&) = delete;
  ~ReaderRole() {
    if (private_source_ != nullptr) ::munmap(private_source_, host_bytes_);
  }

  // Connects and allocates; false with the ERROR's text in *error.
  bool setup(std::string* error) { return connect(error) && allocate(error); }
  std::string transport() const { return subscriber_->transport(); }

  // PULL <v> -> COPIED <memcpy_s>, then HELD <v> <pull_s> <held_ns> <cpu_s> <staged>
  std::optional<std::string> pull(RoleLoop& loop, std::istringstream& in) {
    std::uint64_t version = 0;
    in >> version;
    std::ostringstream copied;
    copied << "COPIED " << paired_memcpy();
    if (!loop.send(copied.str())) return std::nullopt;
    return pull_version(version);
  }

 private:
  bool connect(std::string* error) {
    weightsync::SubscriberOptions options;
    options.transport = config_.transport;
    options.client_name = "bench-reader";
    auto subscriber = weightsync::Subscriber::connect(config_.address, options);
    if (!subscriber.ok()) {
      *error = "connect over " + config_.transport + ": " + subscriber.status().to_string();
      return false;
    }
    subscriber_ = std::move(*subscriber);
    if (subscriber_->layout().total_bytes() != config_.size) {
      *error = "the publisher serves " + std::to_string(subscriber_->layout().total_bytes()) +
               " bytes, not " + std::to_string(config_.size);
      return false;
    }
    return true;
  }

  // The destination (pre-faulted) and the paired memcpy's source.
  bool allocate(std::string* error) {
    if (!cuda_ && config_.destination != "host") {
      *error = "destination must be host or cuda, not '" + config_.destination + "'";
      return false;
    }
    if (cuda_ && !DeviceBuffer::allocate(config_.size, 0, &device_, error)) {
      *error = "cuda destination: " + *error;
      return false;
    }
    // A host destination, or (cuda) a page standing in for it: the paired
    // memcpy is skipped then.
    auto buffer = weightsync::HostBuffer::allocate(host_bytes_);
    if (!buffer.ok()) {
      *error = "destination: " + buffer.status().to_string();
      return false;
    }
    buffer_ = std::move(*buffer);
    std::memset(buffer_.data(), 0, host_bytes_);  // fault the destination in before measuring
    // The paired memcpy's source: ordinary memory in 4 KiB pages, like the
    // publisher's slots (shared memory gets no transparent huge pages here).
    void* source = ::mmap(nullptr, host_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (source == MAP_FAILED) {
      *error = "paired-memcpy source: mmap failed";
      return false;
    }
    private_source_ = source;
    (void)::madvise(private_source_, host_bytes_, MADV_NOHUGEPAGE);
    std::memset(private_source_, 0x33, host_bytes_);
    destination_ = cuda_ ? weightsync::Destination::contiguous(device_.data(), config_.size,
                                                               weightsync::MemoryKind::kCuda)
                         : weightsync::Destination::contiguous(buffer_.data(), config_.size);
    return true;
  }

  // The paired baseline's seconds: a memcpy of the image's size into the
  // destination (0 for a cuda destination, which has none).
  double paired_memcpy() {
    if (cuda_) return 0;
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(buffer_.data(), private_source_, config_.size);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // Waits up to 60 s for `version`, pulls it once, checks its marks: the HELD answer, or an ERROR.
  std::string pull_version(std::uint64_t version) {
    auto ready = subscriber_->wait_for_version(version - 1, std::chrono::seconds(60));
    if (!ready.ok()) {
      return error_line("waiting for version " + std::to_string(version) + ": " + ready.status().to_string());
    }
    weightsync::PullOptions pull_options;
    pull_options.newer_than = version - 1;
    const double cpu_before = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    auto pulled = subscriber_->pull(*destination_, pull_options);
    const auto end = std::chrono::steady_clock::now();
    const double cpu = process_cpu_seconds() - cpu_before;
    std::string marks_error;
    if (!pulled.ok()) return error_line("pull: " + pulled.status().to_string());
    if (cuda_ && !device_image_has_marks(device_, pulled->version, &marks_error))
      return error_line(marks_error);
    if (!cuda_ && !image_has_marks(buffer_.data(), config_.size, pulled->version)) {
      return error_line("pulled version " + std::to_string(pulled->version) +
                        " does not carry its marks: the bytes are wrong");
    }
    std::ostringstream out;
    out << "HELD " << pulled->version << " " << std::chrono::duration<double>(end - start).count() << " "
        << std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count() << " " << cpu
        << " " << (pulled->staged ? 1 : 0);
    return out.str();
  }

  const ReaderRoleConfig config_;
  const bool cuda_;
  const std::uint64_t host_bytes_;
  std::unique_ptr<weightsync::Subscriber> subscriber_;
  DeviceBuffer device_;
  weightsync::HostBuffer buffer_;
  void* private_source_ = nullptr;
  std::optional<weightsync::Destination> destination_;  // device_ or buffer_, once allocated
};

}  // namespace

int run_reader_role(wsutil::LineStream& io, const ReaderRoleConfig& config) {
  ReaderRole role(config);
  std::string error;
  if (!role.setup(&error)) return startup_error(io, error);
  RoleLoop loop(io);
  loop.on("PULL", [&](std::istringstream& in) { return role.pull(loop, in); });
  return loop.ready_then_run(role.transport());
}

}  // namespace wsbench
