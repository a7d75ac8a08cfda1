// Torn-read stress: a publisher process rewrites the slots of a 2-slot ring in
// place as fast as it can, each version with its own byte pattern; a reader
// that is deliberately slow on its first attempt of each pull makes the
// publisher take its slot back mid-read. Over 1000 pulls, no delivered image
// may mix versions; detected-and-retried reads are counted and printed.
#include <catch2/catch.hpp>

#include <thread>

#include "peers.h"

using namespace weightsync;
using namespace wstest;

TEST_CASE("torn-read stress: 2-slot ring, fast writer, slow reader, 1000 pulls, no mixed versions",
          "[consistency][process]") {
  auto peer = start_peer_publisher(
      {"--size", std::to_string(1 << 20), "--tensors", "4", "--slots", "2", "--forever"});
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(10)));
  auto options = quick_options();
  options.max_retries = 100000;
  auto sub = Subscriber::connect(peer.address, options);
  REQUIRE(sub.ok());
  const WeightLayout& layout = (*sub)->layout();
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());

  constexpr int kPulls = 1000;
  std::uint64_t retries = 0, mixed = 0, last_version = 0, distinct_versions = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kPulls; ++i) {
    int slow_chunks = 3;  // slow only at the start of the pull: the first attempt is likely revoked
    PullOptions pull;
    pull.newer_than = 0;
    pull.on_progress = [&](std::uint64_t, std::uint64_t) {
      if (slow_chunks-- > 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    };
    auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()), pull);
    REQUIRE(pulled.ok());
    retries += pulled->retries;
    if (image_mismatch(layout, image->data(), pulled->version) != -1) ++mixed;
    if (pulled->version != last_version) ++distinct_versions;
    last_version = pulled->version;
  }
  const double seconds = seconds_since(start);
  peer.process.close_stdin();
  auto stats_line = peer.process.wait_for("STATS ", std::chrono::seconds(10));
  WARN("torn-read stress: " << kPulls << " pulls in " << seconds << " s (" << kPulls / seconds
                            << " pulls/s), " << retries << " torn or revoked reads detected and retried, "
                            << mixed << " undetected mixed deliveries, " << distinct_versions
                            << " distinct versions; publisher "
                            << (stats_line ? *stats_line : std::string("?")));
  CHECK(mixed == 0);
  CHECK(retries > 0);  // the stress really did race the writer
  CHECK(distinct_versions > 10);
}
