// The fanout bench's publisher and leaf-subscriber roles (protocol in
// fanout.h): one Publisher bound to its host's address with the run's secret
// (WEIGHTSYNC_SECRET in the environment), and one Subscriber per leaf host
// pulling each version into a pre-faulted buffer and checking its marks.
#include <chrono>
#include <cstring>
#include <sstream>

#include "fanout.h"
#include "line_stream.h"
#include "role_support.h"
#include "roles.h"
#include "weightsync/weightsync.h"

namespace wsbench {

int run_fanout_publisher(const std::string& bind, std::uint64_t size) {
  wsutil::LineStream io(0, 1);
  auto layout = weightsync::WeightLayout::build(
      {weightsync::TensorSpec{"image", weightsync::DType::kUInt8, {static_cast<std::int64_t>(size)}}});
  if (!layout.ok()) return io.write_line(error_line("layout: " + layout.status().to_string())), 1;
  weightsync::PublisherOptions options;
  options.bind_address = bind;  // the secret: WEIGHTSYNC_SECRET
  auto publisher = weightsync::Publisher::create(std::move(*layout), options);
  if (!publisher.ok()) return io.write_line(error_line("publisher: " + publisher.status().to_string())), 1;
  auto source = weightsync::HostBuffer::allocate(size);
  if (!source.ok()) return io.write_line(error_line("source: " + source.status().to_string())), 1;
  std::memset(source->data(), 0x5a, size);  // fault it in, non-zero content
  if (!io.write_line("READY " + (*publisher)->address())) return 1;
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
      mark_image(source->data(), size, version);
      // The commit time: the clock right before SlotWriter::commit(), after the
      // copy into the slot (what publish() does, split open). Not the clock after
      // the call: commit() wakes the serving threads, which on busy cores may run
      // (and, over veth, deliver the whole image) before this thread runs again.
      std::int64_t commit_ns = 0;
      auto writer = (*publisher)->begin_publish(version);
      weightsync::Result<weightsync::PublishResult> published = writer.status();
      if (writer.ok()) {
        std::memcpy(writer->data(), source->data(), size);
        commit_ns = monotonic_ns();
        published = writer->commit();
      }
      reply = published.ok() ? "COMMITTED " + std::to_string(version) + " " + std::to_string(commit_ns)
                             : error_line("publish: " + published.status().to_string());
    } else if (command == "CPU") {
      reply = cpu_line();
    } else if (command == "QUIT") {
      return 0;
    } else {
      reply = error_line("unknown command '" + command + "'");
    }
    if (!io.write_line(reply)) return 1;
  }
}

int run_fanout_subscriber(const std::string& upstream, std::uint64_t size, const std::string& transport) {
  wsutil::LineStream io(0, 1);
  weightsync::SubscriberOptions options;  // the secret: WEIGHTSYNC_SECRET
  options.transport = transport;
  options.client_name = "fanout-subscriber";
  // A leaf under a pipelined relay reads a version while the relay still
  // receives it, as the relays do (a publisher that is not a relay never has
  // a version in progress, so this changes nothing for flat).
  options.accept_streaming = true;
  auto subscriber = weightsync::Subscriber::connect(upstream, options);
  if (!subscriber.ok()) {
    io.write_line(error_line("connect to " + upstream + ": " + subscriber.status().to_string()));
    return 1;
  }
  if ((*subscriber)->layout().total_bytes() != size) {
    io.write_line(error_line("the upstream serves " + std::to_string((*subscriber)->layout().total_bytes()) +
                             " bytes, not " + std::to_string(size)));
    return 1;
  }
  auto buffer = weightsync::HostBuffer::allocate(size);
  if (!buffer.ok()) return io.write_line(error_line("destination: " + buffer.status().to_string())), 1;
  std::memset(buffer->data(), 0, size);  // fault the destination in before measuring
  const auto destination = weightsync::Destination::contiguous(buffer->data(), size);
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
      long long timeout_ms = 60000;
      in >> version >> timeout_ms;
      if (!io.write_line("WAITING " + std::to_string(version))) return 1;
      weightsync::PullOptions pull_options;
      pull_options.newer_than = version - 1;
      pull_options.wait = std::chrono::milliseconds(timeout_ms);
      auto pulled = (*subscriber)->pull(destination, pull_options);
      const std::int64_t held_ns = monotonic_ns();
      if (!pulled.ok()) {
        reply = error_line("pull of version " + std::to_string(version) + ": " + pulled.status().to_string());
      } else if (pulled->version != version) {
        reply = error_line("pulled version " + std::to_string(pulled->version) + ", expected " +
                           std::to_string(version));
      } else if (!image_has_marks(buffer->data(), size, version)) {
        reply = error_line("pulled version " + std::to_string(version) +
                           " does not carry its marks: the bytes are wrong");
      } else {
        reply = "HELD " + std::to_string(version) + " " + std::to_string(held_ns);
      }
    } else if (command == "CPU") {
      reply = cpu_line();
    } else if (command == "QUIT") {
      return 0;
    } else {
      reply = error_line("unknown command '" + command + "'");
    }
    if (!io.write_line(reply)) return 1;
  }
}

}  // namespace wsbench
