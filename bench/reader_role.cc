// The reader side of a bench cell: one Subscriber pulling every version it is
// told about into a pre-faulted contiguous buffer (host memory, or cudaMalloc
// memory for the GPU rows), timing each pull and the process's CPU time
// around it.
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "cuda_limits.h"
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

}  // namespace

int run_reader_role(wsutil::LineStream& io, const ReaderRoleConfig& config) {
  weightsync::SubscriberOptions options;
  options.transport = config.transport;
  options.client_name = "bench-reader";
  auto subscriber = weightsync::Subscriber::connect(config.address, options);
  if (!subscriber.ok()) {
    io.write_line(error_line("connect over " + config.transport + ": " + subscriber.status().to_string()));
    return 1;
  }
  if ((*subscriber)->layout().total_bytes() != config.size) {
    io.write_line(error_line("the publisher serves " + std::to_string((*subscriber)->layout().total_bytes()) +
                             " bytes, not " + std::to_string(config.size)));
    return 1;
  }
  const bool cuda = config.destination == "cuda";
  if (!cuda && config.destination != "host") {
    io.write_line(error_line("destination must be host or cuda, not '" + config.destination + "'"));
    return 1;
  }
  DeviceBuffer device;
  std::string device_error;
  if (cuda && !DeviceBuffer::allocate(config.size, 0, &device, &device_error)) {
    io.write_line(error_line("cuda destination: " + device_error));
    return 1;
  }
  // A host destination, or (cuda) a page standing in for it: the paired
  // memcpy is skipped then.
  auto buffer = weightsync::HostBuffer::allocate(cuda ? 4096 : config.size);
  if (!buffer.ok()) {
    io.write_line(error_line("destination: " + buffer.status().to_string()));
    return 1;
  }
  const std::uint64_t host_bytes = cuda ? 4096 : config.size;
  std::memset(buffer->data(), 0, host_bytes);  // fault the destination in before measuring
  // The paired memcpy's source: ordinary memory in 4 KiB pages, like the
  // publisher's slots (shared memory gets no transparent huge pages here).
  void* private_source =
      ::mmap(nullptr, host_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (private_source == MAP_FAILED) {
    io.write_line(error_line("paired-memcpy source: mmap failed"));
    return 1;
  }
  (void)::madvise(private_source, host_bytes, MADV_NOHUGEPAGE);
  std::memset(private_source, 0x33, host_bytes);
  const auto destination =
      cuda ? weightsync::Destination::contiguous(device.data(), config.size, weightsync::MemoryKind::kCuda)
           : weightsync::Destination::contiguous(buffer->data(), config.size);
  if (!io.write_line("READY " + (*subscriber)->transport())) return 1;

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
      double copy_s = 0;  // a cuda destination has no paired memcpy
      if (!cuda) {
        const auto copy_start = std::chrono::steady_clock::now();
        std::memcpy(buffer->data(), private_source, config.size);
        copy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - copy_start).count();
      }
      std::ostringstream copied;
      copied << "COPIED " << copy_s;
      if (!io.write_line(copied.str())) return 1;
      auto ready = (*subscriber)->wait_for_version(version - 1, std::chrono::seconds(60));
      if (!ready.ok()) {
        reply =
            error_line("waiting for version " + std::to_string(version) + ": " + ready.status().to_string());
      } else {
        weightsync::PullOptions pull_options;
        pull_options.newer_than = version - 1;
        const double cpu_before = process_cpu_seconds();
        const auto start = std::chrono::steady_clock::now();
        auto pulled = (*subscriber)->pull(destination, pull_options);
        const auto end = std::chrono::steady_clock::now();
        const double cpu = process_cpu_seconds() - cpu_before;
        std::string marks_error;
        if (!pulled.ok()) {
          reply = error_line("pull: " + pulled.status().to_string());
        } else if (cuda && !device_image_has_marks(device, pulled->version, &marks_error)) {
          reply = error_line(marks_error);
        } else if (!cuda && !image_has_marks(buffer->data(), config.size, pulled->version)) {
          reply = error_line("pulled version " + std::to_string(pulled->version) +
                             " does not carry its marks: the bytes are wrong");
        } else {
          std::ostringstream out;
          out << "HELD " << pulled->version << " " << std::chrono::duration<double>(end - start).count()
              << " " << std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count()
              << " " << cpu << " " << (pulled->staged ? 1 : 0);
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
