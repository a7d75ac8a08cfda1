// Checksums: a bit flipped in transit (by a fault-injecting TCP proxy in front
// of the real transport) is detected and the pull retried; without checksums
// the same corruption would be delivered, which is why they exist.
#include <catch2/catch.hpp>

#include "peers.h"
#include "tcp_proxy.h"

using namespace weightsync;
using namespace wstest;

namespace {

std::unique_ptr<Publisher> publish_one(const WeightLayout& layout, bool checksums) {
  PublisherOptions options;
  options.checksum = checksums;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  publish_pattern(**publisher, 1);
  return std::move(*publisher);
}

}  // namespace

TEST_CASE("checksum: corruption in transit is detected, discarded and retried", "[checksum]") {
  const auto layout = bytes_layout(4 << 20, 3);
  auto publisher = publish_one(layout, /*checksums=*/true);
  // Connection 2 is the data connection (1 is control); flip a bit 1 MiB into it.
  FaultyProxy proxy(publisher->port(), 2, 1 << 20);
  auto sub = Subscriber::connect(proxy.address(), quick_options());
  REQUIRE(sub.ok());
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK(proxy.flips() == 1);
  CHECK(pulled->retries == 1);  // the corrupt attempt was caught and retried
  CHECK(pulled->checksum_verified);
  CHECK(image_mismatch(layout, image->data(), 1) == -1);

  // With retries disabled the caller sees the mismatch itself.
  FaultyProxy proxy2(publisher->port(), 2, 1 << 20);
  auto options = quick_options();
  options.max_retries = 0;
  auto strict = Subscriber::connect(proxy2.address(), options);
  REQUIRE(strict.ok());
  auto failed = (*strict)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == ErrorCode::kChecksumMismatch);
  CHECK(failed.status().action() == Action::kRetry);
  CHECK((*strict)->status().ok());  // not a connection error: the next pull works
  auto next = (*strict)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(next.ok());
  CHECK(next->checksum_verified);
  CHECK(image_mismatch(layout, image->data(), 1) == -1);
}

TEST_CASE("checksum: without checksums the same corruption goes unnoticed", "[checksum]") {
  const auto layout = bytes_layout(4 << 20, 3);
  auto publisher = publish_one(layout, /*checksums=*/false);
  FaultyProxy proxy(publisher->port(), 2, 1 << 20);
  auto sub = Subscriber::connect(proxy.address(), quick_options());
  REQUIRE(sub.ok());
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK_FALSE(pulled->checksum_verified);
  CHECK(proxy.flips() == 1);
  CHECK(image_mismatch(layout, image->data(), 1) != -1);  // the flipped bit is in the delivered bytes
}
