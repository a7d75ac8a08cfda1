// The reader side of a bench cell: one Subscriber pulling every version it is
// told about into a pre-faulted contiguous buffer, timing each pull and the
// process's CPU time around it.
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "role_support.h"
#include "roles.h"
#include "weightsync/weightsync.h"

namespace wsbench {

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
  auto buffer = weightsync::HostBuffer::allocate(config.size);
  if (!buffer.ok()) {
    io.write_line(error_line("destination: " + buffer.status().to_string()));
    return 1;
  }
  std::memset(buffer->data(), 0, config.size);  // fault the destination in before measuring
  // The paired memcpy's source: ordinary memory in 4 KiB pages, like the
  // publisher's slots (shared memory gets no transparent huge pages here).
  void* private_source =
      ::mmap(nullptr, config.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (private_source == MAP_FAILED) {
    io.write_line(error_line("paired-memcpy source: mmap failed"));
    return 1;
  }
  (void)::madvise(private_source, config.size, MADV_NOHUGEPAGE);
  std::memset(private_source, 0x33, config.size);
  const auto destination = weightsync::Destination::contiguous(buffer->data(), config.size);
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
      const auto copy_start = std::chrono::steady_clock::now();
      std::memcpy(buffer->data(), private_source, config.size);
      const double copy_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - copy_start).count();
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
        if (!pulled.ok()) {
          reply = error_line("pull: " + pulled.status().to_string());
        } else if (!image_has_marks(buffer->data(), config.size, pulled->version)) {
          reply = error_line("pulled version " + std::to_string(pulled->version) +
                             " does not carry its marks: the bytes are wrong");
        } else {
          std::ostringstream out;
          out << "HELD " << pulled->version << " " << std::chrono::duration<double>(end - start).count()
              << " " << std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count()
              << " " << cpu;
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
