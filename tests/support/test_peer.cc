// ws_test_peer: the other process of the multi-process tests.
//
//   ws_test_peer publish --size B --tensors N --slots S --versions V
//                        [--forever] [--checksum] [--secret S] [--timeout-ms T]
//                        [--slot-memory host|cuda] [--pause-us U] [--bind ADDR]
//                        [--port P] [--first F]
//     --port: a fixed port (default: a free one). --first: the first version
//     published is F (then F+1, ...; default 1), for an upstream that takes
//     over from another. --bind: PublisherOptions::bind_address (a non-loopback one needs a secret:
//     --secret or WEIGHTSYNC_SECRET). Prints "ADDRESS host:port", publishes versions 1..V with the test
//     pattern (writing in place into the slot), prints "PUBLISHED V", then
//     serves until stdin closes. With --forever it keeps publishing new
//     versions as fast as it can until stdin closes. With --step it publishes
//     one version per line read from stdin, printing "PUBLISHED v" each time.
//
//   ws_test_peer subscribe --address A [--slow-ms M] [--transport T] [--secret S]
//     Pulls one version; prints "PROGRESS" at the first received bytes (then
//     sleeps M ms per chunk), then "PULLED v" (bytes verified) or "ERROR ...".
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_runtime.h"
#include "patterns.h"
#include "weightsync/weightsync.h"

namespace {

struct Args {
  std::vector<std::string> rest;
  std::string get(const std::string& name, const std::string& fallback) const {
    for (std::size_t i = 0; i + 1 < rest.size(); ++i) {
      if (rest[i] == name) return rest[i + 1];
    }
    return fallback;
  }
  bool has(const std::string& name) const {
    for (const auto& r : rest) {
      if (r == name) return true;
    }
    return false;
  }
};

bool stdin_closed() {
  pollfd p{0, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return ::read(0, &c, 1) <= 0;
}

int run_publisher(const Args& args) {
  const std::uint64_t size = std::strtoull(args.get("--size", "1048576").c_str(), nullptr, 10);
  const int tensors = std::atoi(args.get("--tensors", "4").c_str());
  const std::uint64_t versions = std::strtoull(args.get("--versions", "1").c_str(), nullptr, 10);
  weightsync::PublisherOptions options;
  options.slots = static_cast<std::size_t>(std::atoi(args.get("--slots", "3").c_str()));
  options.checksum = args.has("--checksum");
  if (args.has("--secret")) options.secret = args.get("--secret", "");
  if (args.has("--bind")) options.bind_address = args.get("--bind", "");
  options.port = static_cast<std::uint16_t>(std::atoi(args.get("--port", "0").c_str()));
  const std::uint64_t first = std::strtoull(args.get("--first", "1").c_str(), nullptr, 10);
  options.io_timeout_ms = std::atoi(args.get("--timeout-ms", "5000").c_str());
  const bool cuda_slots = args.get("--slot-memory", "host") == "cuda";
  if (cuda_slots) options.slot_memory = weightsync::MemoryKind::kCuda;
  const auto layout = wstest::bytes_layout(size, tensors);
  // CUDA slots are written from a host image (the pattern) with cudaMemcpy.
  std::vector<char> host_image(cuda_slots ? layout.total_bytes() : 0);
  auto publisher = weightsync::Publisher::create(layout, options);
  if (!publisher.ok()) {
    std::printf("ERROR %s\n", publisher.status().to_string().c_str());
    return 2;
  }
  std::printf("ADDRESS %s\n", (*publisher)->address().c_str());
  std::fflush(stdout);
  const bool forever = args.has("--forever");
  // --forever: pause this long between versions (0: publish as fast as possible).
  const auto pause = std::chrono::microseconds(std::atoll(args.get("--pause-us", "0").c_str()));
  const bool step = args.has("--step");
  for (std::uint64_t v = first; forever || v < first + versions; ++v) {
    if (step) {
      char line[64];
      if (std::fgets(line, sizeof(line), stdin) == nullptr) return 0;
    }
    auto writer = (*publisher)->begin_publish(v);
    if (!writer.ok()) {
      std::printf("ERROR %s\n", writer.status().to_string().c_str());
      return 1;
    }
    char* target = cuda_slots ? host_image.data() : static_cast<char*>(writer->data());
    for (const auto& t : layout.tensors()) wstest::fill_pattern(target + t.offset, t.bytes, v, t.offset);
    if (cuda_slots) {
      auto copied = weightsync::detail::copy_sync(writer->data(), host_image.data(), host_image.size());
      if (!copied.ok()) {
        std::printf("ERROR %s\n", copied.to_string().c_str());
        return 1;
      }
    }
    auto committed = writer->commit();
    if (!committed.ok()) {
      std::printf("ERROR %s\n", committed.status().to_string().c_str());
      return 1;
    }
    if (step || (!forever && v + 1 == first + versions)) {
      std::printf("PUBLISHED %llu\n", static_cast<unsigned long long>(v));
      std::fflush(stdout);
    }
    if (forever && v == first) {
      std::printf("PUBLISHED %llu\n", static_cast<unsigned long long>(v));
      std::fflush(stdout);
    }
    if (forever && stdin_closed()) break;
    if (forever && pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  while (!stdin_closed()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto stats = (*publisher)->stats();
  std::printf("STATS published=%llu revoked=%llu\n",
              static_cast<unsigned long long>(stats.versions_published),
              static_cast<unsigned long long>(stats.leases_revoked));
  return 0;
}

int run_subscriber(const Args& args) {
  weightsync::SubscriberOptions options;
  options.client_name = "test-peer";
  options.transport = args.get("--transport", "auto");
  if (args.has("--secret")) options.secret = args.get("--secret", "");
  auto sub = weightsync::Subscriber::connect(args.get("--address", ""), options);
  if (!sub.ok()) {
    std::printf("ERROR %s\n", sub.status().to_string().c_str());
    return 2;
  }
  const int slow_ms = std::atoi(args.get("--slow-ms", "0").c_str());
  const auto& layout = (*sub)->layout();
  auto region = weightsync::HostBuffer::allocate(layout.total_bytes());
  if (!region.ok()) return 2;
  weightsync::PullOptions pull;
  pull.wait = std::chrono::seconds(10);
  bool announced = false;
  pull.on_progress = [&](std::uint64_t, std::uint64_t) {
    if (!announced) {
      std::printf("PROGRESS\n");
      std::fflush(stdout);
      announced = true;
    }
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
  };
  auto pulled = (*sub)->pull(weightsync::Destination::contiguous(region->data(), region->size()), pull);
  if (!pulled.ok()) {
    std::printf("ERROR %s\n", pulled.status().to_string().c_str());
    return 1;
  }
  for (const auto& t : layout.tensors()) {
    if (wstest::find_mismatch(static_cast<char*>(region->data()) + t.offset, t.bytes, pulled->version,
                              t.offset) >= 0) {
      std::printf("ERROR bytes of version %llu are wrong\n",
                  static_cast<unsigned long long>(pulled->version));
      return 1;
    }
  }
  std::printf("PULLED %llu\n", static_cast<unsigned long long>(pulled->version));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ws_test_peer publish|subscribe [options] (see the source header)\n");
    return 2;
  }
  Args args;
  for (int i = 2; i < argc; ++i) args.rest.emplace_back(argv[i]);
  const std::string mode = argv[1];
  if (mode == "publish") return run_publisher(args);
  if (mode == "subscribe") return run_subscriber(args);
  std::fprintf(stderr, "ws_test_peer: unknown mode '%s'\n", mode.c_str());
  return 2;
}
