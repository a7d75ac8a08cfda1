// The device-publish pipeline (Publisher::publish_from_device): enqueue on
// the caller's thread, copy asynchronously, commit on the publisher's commit
// thread only when the copy is complete, one in flight, failures abandoned
// and reported. Runs on any machine: host memory stands in for the GPU and a
// thread for its copy engine (tests/support/host_staging.h), with copies
// deliberately late so that "not yet committed" is observable. The CUDA
// copier itself needs a GPU (cuda_test.cc, conformance "pulls into CUDA memory").
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include "host_staging.h"
#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {

std::unique_ptr<Publisher> make_publisher(std::uint64_t size = (1 << 20) + 13, int tensors = 3) {
  PublisherOptions options;
  options.slots = 3;
  options.secret = "";
  auto publisher = Publisher::create(bytes_layout(size, tensors), options);
  REQUIRE(publisher.ok());
  return std::move(*publisher);
}

std::vector<char> image_of(const WeightLayout& layout, std::uint64_t version) {
  std::vector<char> image(layout.total_bytes());
  for (const auto& t : layout.tensors()) fill_pattern(image.data() + t.offset, t.bytes, version, t.offset);
  return image;
}

// Pulls the newest version over tcp and checks every byte.
void expect_pulled(const Publisher& publisher, std::uint64_t version) {
  auto sub = Subscriber::connect(publisher.address(), quick_options(5000, "tcp"));
  REQUIRE(sub.ok());
  std::vector<char> pulled(publisher.layout().total_bytes());
  auto result = (*sub)->pull(Destination::contiguous(pulled.data(), pulled.size()));
  INFO(result.status().to_string());
  REQUIRE(result.ok());
  CHECK(result->version == version);
  CHECK(image_mismatch(publisher.layout(), pulled.data(), version) == -1);
}

}  // namespace

TEST_CASE("device publish: returns before the copy ends, commits only when it is complete",
          "[device-publish]") {
  ScopedHostStaging device(std::chrono::milliseconds(150));
  auto publisher = make_publisher();
  const auto source = image_of(publisher->layout(), 1);
  const auto start = std::chrono::steady_clock::now();
  auto ticket = publisher->publish_from_device(1, source.data(), source.size());
  const double returned_after = seconds_since(start);
  INFO(ticket.status().to_string());
  REQUIRE(ticket.ok());
  CHECK(ticket->version == 1);
  CHECK(returned_after < 0.1);              // the caller did not wait for the 150 ms copy
  CHECK(publisher->latest_version() == 0);  // not visible while the copy is in flight
  auto committed = publisher->flush_device_publishes(std::chrono::seconds(10));
  REQUIRE(committed.ok());
  CHECK(committed->version == 1);
  CHECK(committed->copy_seconds >= 0.14);
  CHECK(publisher->latest_version() == 1);
  expect_pulled(*publisher, 1);
}

TEST_CASE("device publish: the next publish waits for the one in flight, versions commit in order",
          "[device-publish]") {
  ScopedHostStaging device(std::chrono::milliseconds(80));
  auto publisher = make_publisher();
  const auto v1 = image_of(publisher->layout(), 1);
  const auto v2 = image_of(publisher->layout(), 2);
  REQUIRE(publisher->publish_from_device(1, v1.data(), v1.size()).ok());
  REQUIRE(publisher->publish_from_device(2, v2.data(), v2.size()).ok());
  CHECK(publisher->latest_version() == 1);  // v1 committed before v2 was reserved
  // A host publish also waits for the device publish in flight first.
  const auto v3 = image_of(publisher->layout(), 3);
  REQUIRE(publisher->publish(3, v3.data(), v3.size()).ok());
  CHECK(publisher->latest_version() == 3);
  CHECK(publisher->stats().versions_published == 3);
  expect_pulled(*publisher, 3);
}

TEST_CASE("device publish: a failed copy is abandoned, never seen, and reported once", "[device-publish]") {
  auto control = std::make_shared<CopierControl>();
  ScopedHostStaging device(std::chrono::milliseconds(20), control);
  auto publisher = make_publisher();
  const auto v1 = image_of(publisher->layout(), 1);
  control->fail_next = true;
  REQUIRE(publisher->publish_from_device(1, v1.data(), v1.size()).ok());  // the failure comes later
  auto flushed = publisher->flush_device_publishes(std::chrono::seconds(10));
  REQUIRE_FALSE(flushed.ok());
  CHECK(flushed.status().message().find("injected copy failure") != std::string::npos);
  CHECK(flushed.status().message().find("was not published") != std::string::npos);
  CHECK(publisher->latest_version() == 0);
  // Failed again; this time the next publish call reports it, and publishes nothing.
  control->fail_next = true;
  REQUIRE(publisher->publish_from_device(2, v1.data(), v1.size()).ok());
  const auto v3 = image_of(publisher->layout(), 3);
  auto reported = publisher->publish(3, v3.data(), v3.size());
  REQUIRE_FALSE(reported.ok());
  CHECK(reported.status().message().find("version 2") != std::string::npos);
  CHECK(publisher->latest_version() == 0);
  // Reported once: the same call again goes through, and the ring lost no slot.
  for (std::uint64_t v = 3; v <= 6; ++v) {
    const auto image = image_of(publisher->layout(), v);
    REQUIRE(publisher->publish_from_device(v, image.data(), image.size()).ok());
    REQUIRE(publisher->flush_device_publishes(std::chrono::seconds(10)).ok());
  }
  CHECK(publisher->latest_version() == 6);
  expect_pulled(*publisher, 6);
}

TEST_CASE("device publish: one source per tensor lands at its offset", "[device-publish]") {
  ScopedHostStaging device(std::chrono::milliseconds(5));
  auto publisher = make_publisher((1 << 20) + 13, 5);
  const WeightLayout& layout = publisher->layout();
  const auto image = image_of(layout, 7);
  std::vector<std::vector<char>> tensors;
  std::vector<TensorSource> sources;
  for (const auto& t : layout.tensors()) {
    tensors.emplace_back(image.begin() + static_cast<std::ptrdiff_t>(t.offset),
                         image.begin() + static_cast<std::ptrdiff_t>(t.offset + t.bytes));
  }
  // In reverse order: sources are matched by name.
  for (std::size_t i = layout.tensors().size(); i-- > 0;)
    sources.push_back(TensorSource{layout.tensors()[i].spec.name, tensors[i].data(), tensors[i].size()});
  REQUIRE(publisher->publish_from_device(7, sources).ok());
  REQUIRE(publisher->flush_device_publishes(std::chrono::seconds(10)).ok());
  expect_pulled(*publisher, 7);
}

TEST_CASE("device publish: bad sources are refused before any slot is touched", "[device-publish]") {
  ScopedHostStaging device;
  auto publisher = make_publisher((1 << 20) + 13, 3);
  const WeightLayout& layout = publisher->layout();
  const auto image = image_of(layout, 1);
  CHECK(publisher->publish_from_device(1, image.data(), image.size() - 1).status().code() ==
        ErrorCode::kInvalidArgument);
  CHECK(publisher->publish_from_device(1, nullptr, image.size()).status().code() ==
        ErrorCode::kInvalidArgument);
  const auto& t = layout.tensors();
  std::vector<TensorSource> twice = {{t[0].spec.name, image.data(), t[0].bytes},
                                     {t[0].spec.name, image.data(), t[0].bytes},
                                     {t[2].spec.name, image.data(), t[2].bytes}};
  CHECK(publisher->publish_from_device(1, twice).status().code() == ErrorCode::kInvalidArgument);
  std::vector<TensorSource> unknown = {{"nope", image.data(), t[0].bytes},
                                       {t[1].spec.name, image.data(), t[1].bytes},
                                       {t[2].spec.name, image.data(), t[2].bytes}};
  CHECK(publisher->publish_from_device(1, unknown).status().code() == ErrorCode::kInvalidArgument);
  // A SlotWriter that is open blocks device publishes too.
  {
    auto writer = publisher->begin_publish(1);
    REQUIRE(writer.ok());
    CHECK(publisher->publish_from_device(2, image.data(), image.size()).status().code() ==
          ErrorCode::kInvalidArgument);
  }
  // Nothing was reserved or lost.
  REQUIRE(publisher->publish_from_device(1, image.data(), image.size()).ok());
  REQUIRE(publisher->flush_device_publishes(std::chrono::seconds(10)).ok());
  CHECK(publisher->latest_version() == 1);
}

TEST_CASE("device publish: order_after waits for the copy, and the destructor for one in flight",
          "[device-publish]") {
  auto control = std::make_shared<CopierControl>();
  ScopedHostStaging device(std::chrono::milliseconds(100), control);
  {
    auto publisher = make_publisher();
    CHECK(publisher->order_after_device_publish(nullptr).ok());  // none yet: nothing to wait for
    const auto image = image_of(publisher->layout(), 1);
    REQUIRE(publisher->publish_from_device(1, image.data(), image.size()).ok());
    REQUIRE(publisher->order_after_device_publish(nullptr).ok());
    std::lock_guard<std::mutex> lock(control->mu);
    CHECK(control->batches == 1);  // the copy has read its sources
  }
  {
    std::vector<char> image;  // the source outlives the publisher, as the contract requires
    auto publisher = make_publisher();
    image = image_of(publisher->layout(), 1);
    REQUIRE(publisher->publish_from_device(1, image.data(), image.size()).ok());
    // Destroyed with the copy in flight: it must end before the slots go (ASan checks the rest).
  }
  std::lock_guard<std::mutex> lock(control->mu);
  CHECK(control->batches == 2);
}
