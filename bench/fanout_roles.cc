// The fanout bench's publisher and leaf-subscriber roles (protocol in
// fanout.h): one Publisher bound to its host's address with the run's secret
// (WEIGHTSYNC_SECRET in the environment), and one Subscriber per leaf host
// pulling each version into a pre-faulted buffer and checking its marks.
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>

#include "fanout.h"
#include "line_stream.h"
#include "role_loop.h"
#include "role_support.h"
#include "roles.h"
#include "weightsync/weightsync.h"

namespace wsbench {
namespace {

// PUBLISH <v> -> COMMITTED <v> <commit_ns>: marks `source` for v and publishes it.
std::string publish(weightsync::Publisher& publisher, weightsync::HostBuffer& source, std::uint64_t size,
                    std::istringstream& in) {
  std::uint64_t version = 0;
  in >> version;
  mark_image(source.data(), size, version);
  // The commit time: the clock right before SlotWriter::commit(), after the
  // copy into the slot (what publish() does, split open). Not the clock after
  // the call: commit() wakes the serving threads, which on busy cores may run
  // (and, over veth, deliver the whole image) before this thread runs again.
  std::int64_t commit_ns = 0;
  auto writer = publisher.begin_publish(version);
  weightsync::Result<weightsync::PublishResult> published = writer.status();
  if (writer.ok()) {
    std::memcpy(writer->data(), source.data(), size);
    commit_ns = monotonic_ns();
    published = writer->commit();
  }
  return published.ok() ? "COMMITTED " + std::to_string(version) + " " + std::to_string(commit_ns)
                        : error_line("publish: " + published.status().to_string());
}

// A leaf subscriber's connection and its pre-faulted destination.
struct Leaf {
  std::unique_ptr<weightsync::Subscriber> subscriber;
  weightsync::HostBuffer buffer;
  std::uint64_t size = 0;
  std::optional<weightsync::Destination> destination;  // `buffer`, once allocated
};

bool connect_leaf(const std::string& upstream, const std::string& transport, Leaf* leaf, std::string* error) {
  weightsync::SubscriberOptions options;  // the secret: WEIGHTSYNC_SECRET
  options.transport = transport;
  options.client_name = "fanout-subscriber";
  // A leaf under a pipelined relay reads a version while the relay still
  // receives it, as the relays do (a publisher that is not a relay never has
  // a version in progress, so this changes nothing for flat).
  options.accept_streaming = true;
  auto subscriber = weightsync::Subscriber::connect(upstream, options);
  if (!subscriber.ok()) {
    *error = "connect to " + upstream + ": " + subscriber.status().to_string();
    return false;
  }
  leaf->subscriber = std::move(*subscriber);
  if (leaf->subscriber->layout().total_bytes() != leaf->size) {
    *error = "the upstream serves " + std::to_string(leaf->subscriber->layout().total_bytes()) +
             " bytes, not " + std::to_string(leaf->size);
    return false;
  }
  auto buffer = weightsync::HostBuffer::allocate(leaf->size);
  if (!buffer.ok()) {
    *error = "destination: " + buffer.status().to_string();
    return false;
  }
  leaf->buffer = std::move(*buffer);
  std::memset(leaf->buffer.data(), 0, leaf->size);  // fault the destination in before measuring
  leaf->destination = weightsync::Destination::contiguous(leaf->buffer.data(), leaf->size);
  return true;
}

// PULL <v> <timeout_ms> -> WAITING <v>, then HELD <v> <held_ns> once v is pulled and its marks check out.
std::optional<std::string> pull(RoleLoop& loop, Leaf& leaf, std::istringstream& in) {
  std::uint64_t version = 0;
  long long timeout_ms = 60000;
  in >> version >> timeout_ms;
  if (!loop.send("WAITING " + std::to_string(version))) return std::nullopt;
  weightsync::PullOptions pull_options;
  pull_options.newer_than = version - 1;
  pull_options.wait = std::chrono::milliseconds(timeout_ms);
  auto pulled = leaf.subscriber->pull(*leaf.destination, pull_options);
  const std::int64_t held_ns = monotonic_ns();
  if (!pulled.ok()) {
    return error_line("pull of version " + std::to_string(version) + ": " + pulled.status().to_string());
  }
  if (pulled->version != version) {
    return error_line("pulled version " + std::to_string(pulled->version) + ", expected " +
                      std::to_string(version));
  }
  if (!image_has_marks(leaf.buffer.data(), leaf.size, version)) {
    return error_line("pulled version " + std::to_string(version) +
                      " does not carry its marks: the bytes are wrong");
  }
  return "HELD " + std::to_string(version) + " " + std::to_string(held_ns);
}

}  // namespace

int run_fanout_publisher(const std::string& bind, std::uint64_t size) {
  wsutil::LineStream io(0, 1);
  auto layout = weightsync::WeightLayout::build(
      {weightsync::TensorSpec{"image", weightsync::DType::kUInt8, {static_cast<std::int64_t>(size)}}});
  if (!layout.ok()) return startup_error(io, "layout: " + layout.status().to_string());
  weightsync::PublisherOptions options;
  options.bind_address = bind;  // the secret: WEIGHTSYNC_SECRET
  auto publisher = weightsync::Publisher::create(std::move(*layout), options);
  if (!publisher.ok()) return startup_error(io, "publisher: " + publisher.status().to_string());
  auto source = weightsync::HostBuffer::allocate(size);
  if (!source.ok()) return startup_error(io, "source: " + source.status().to_string());
  std::memset(source->data(), 0x5a, size);  // fault it in, non-zero content
  RoleLoop loop(io);
  loop.on("PUBLISH", [&](std::istringstream& in) { return publish(**publisher, *source, size, in); });
  loop.on("CPU", [](std::istringstream&) { return cpu_line(); });
  return loop.ready_then_run((*publisher)->address());
}

int run_fanout_subscriber(const std::string& upstream, std::uint64_t size, const std::string& transport) {
  wsutil::LineStream io(0, 1);
  Leaf leaf;
  leaf.size = size;
  std::string error;
  if (!connect_leaf(upstream, transport, &leaf, &error)) return startup_error(io, error);
  RoleLoop loop(io);
  loop.on("PULL", [&](std::istringstream& in) { return pull(loop, leaf, in); });
  loop.on("CPU", [](std::istringstream&) { return cpu_line(); });
  return loop.ready_then_run(leaf.subscriber->transport());
}

}  // namespace wsbench
