// Publish/pull between two real processes over loopback TCP: several versions,
// sizes from 1 byte to 256 MiB, contiguous and scatter destinations, every
// byte checked. And the in-process API: in-place publish, waits, checksums.
#include <catch2/catch.hpp>

#include <thread>

#include "peers.h"

using namespace weightsync;
using namespace wstest;

TEST_CASE("pubsub: versions arrive bit-exact across processes, 1 B to 256 MiB, contiguous and scatter",
          "[pubsub][process]") {
  const std::uint64_t size = GENERATE(1ull, 4097ull, (1ull << 20) + 13, 64ull << 20, 256ull << 20);
  const int tensors = size < 16 ? 1 : 7;
  INFO("slot payload " << size << " bytes in " << tensors << " tensors");
  auto peer = start_peer_publisher({"--size", std::to_string(size), "--tensors", std::to_string(tensors),
                                    "--slots", "3", "--versions", "3", "--step"});
  auto sub = Subscriber::connect(peer.address, quick_options());
  REQUIRE(sub.ok());
  const WeightLayout& layout = (*sub)->layout();
  CHECK(layout.payload_bytes() == size);
  CHECK((*sub)->transport() == "tcp");

  auto region = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(region.ok());
  auto scatter_buffers = allocate_scatter(layout);
  const auto& buffers = scatter_buffers.buffers;
  const auto& entries = scatter_buffers.entries;
  const auto contiguous = Destination::contiguous(region->data(), region->size());
  const auto scatter = Destination::scatter(entries);

  for (std::uint64_t version = 1; version <= 3; ++version) {
    peer.process.write_line("next");
    REQUIRE(peer.process.wait_for("PUBLISHED " + std::to_string(version), std::chrono::seconds(30)));
    const bool use_scatter = version % 2 == 0;
    INFO("version " << version << (use_scatter ? " scatter" : " contiguous"));
    auto pulled = (*sub)->pull(use_scatter ? scatter : contiguous);
    REQUIRE(pulled.ok());
    CHECK(pulled->version == version);
    CHECK(pulled->bytes == size);
    CHECK((*sub)->held_version() == version);
    if (use_scatter) {
      for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
        const auto& t = layout.tensors()[i];
        CHECK(find_mismatch(buffers[i].data(), t.bytes, version, t.offset) == -1);
      }
    } else {
      CHECK(image_mismatch(layout, region->data(), version) == -1);
    }
    // Nothing newer yet: a pull without waiting says so and changes nothing.
    auto again = (*sub)->pull(contiguous);
    REQUIRE_FALSE(again.ok());
    CHECK(again.status().code() == ErrorCode::kNotReady);
  }
}

TEST_CASE("pubsub: in-place and copy publishes, waiting for versions, checksums verified", "[pubsub]") {
  const auto layout = bytes_layout(3 << 20, 5);
  PublisherOptions options;
  options.checksum = true;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  CHECK((*publisher)->address().rfind("127.0.0.1:", 0) == 0);

  auto sub = Subscriber::connect((*publisher)->address(), quick_options());
  REQUIRE(sub.ok());
  CHECK((*sub)->publisher_checksums());
  CHECK((*sub)->layout() == layout);
  CHECK(*(*sub)->latest_version() == 0);

  auto start = std::chrono::steady_clock::now();
  auto waited = (*sub)->wait_for_version(0, std::chrono::milliseconds(200));
  REQUIRE_FALSE(waited.ok());
  CHECK(waited.status().code() == ErrorCode::kTimeout);
  CHECK(seconds_since(start) >= 0.19);
  CHECK(seconds_since(start) < 2.0);
  CHECK((*sub)->status().ok());  // a wait that times out does not break the connection

  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());

  // Version 1 published in place from another thread while the subscriber waits.
  std::thread trainer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto writer = (*publisher)->begin_publish(1);
    REQUIRE(writer.ok());
    for (const auto& t : layout.tensors()) {
      auto p = writer->tensor(t.spec.name);
      REQUIRE(p.ok());
      fill_pattern(*p, t.bytes, 1, t.offset);
    }
    REQUIRE(writer->commit().ok());
  });
  PullOptions wait_options;
  wait_options.wait = std::chrono::seconds(5);
  std::uint64_t progress_calls = 0, last_done = 0, total_seen = 0;
  wait_options.on_progress = [&](std::uint64_t done, std::uint64_t total) {
    ++progress_calls;
    CHECK(done >= last_done);
    last_done = done;
    total_seen = total;
  };
  auto first = (*sub)->pull(Destination::contiguous(image->data(), image->size()), wait_options);
  trainer.join();
  REQUIRE(first.ok());
  CHECK(first->version == 1);
  CHECK(first->checksum_verified);
  CHECK(image_mismatch(layout, image->data(), 1) == -1);
  CHECK(first->wait_seconds >= 0.05);  // it waited for the trainer thread's commit...
  CHECK(first->seconds < 2.0);         // ...and that wait is not counted as transfer time
  CHECK(progress_calls > 0);
  CHECK(last_done == layout.payload_bytes());
  CHECK(total_seen == layout.payload_bytes());

  // Version 2 by copy from caller tensors.
  std::vector<std::vector<std::uint8_t>> sources;
  std::vector<TensorSource> tensors;
  for (const auto& t : layout.tensors()) {
    sources.emplace_back(t.bytes);
    fill_pattern(sources.back().data(), t.bytes, 2, t.offset);
    tensors.push_back({t.spec.name, sources.back().data(), t.bytes});
  }
  auto published = (*publisher)->publish(2, tensors);
  REQUIRE(published.ok());
  CHECK(published->version == 2);
  auto second = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(second.ok());
  CHECK(second->version == 2);
  CHECK(second->checksum_verified);
  CHECK(image_mismatch(layout, image->data(), 2) == -1);

  // Version 3 from one contiguous image.
  auto source = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(source.ok());
  for (const auto& t : layout.tensors())
    fill_pattern(static_cast<char*>(source->data()) + t.offset, t.bytes, 3, t.offset);
  REQUIRE((*publisher)->publish(3, source->data(), layout.total_bytes()).ok());
  auto third = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(third.ok());
  CHECK(third->version == 3);
  CHECK(image_mismatch(layout, image->data(), 3) == -1);

  // Bad calls are refused without publishing anything.
  CHECK((*publisher)->publish(3, source->data(), layout.total_bytes()).status().code() ==
        ErrorCode::kInvalidArgument);
  CHECK((*publisher)->publish(4, source->data(), 10).status().code() == ErrorCode::kInvalidArgument);
  tensors.pop_back();
  CHECK((*publisher)->publish(4, tensors).status().code() == ErrorCode::kInvalidArgument);
  {
    auto abandoned = (*publisher)->begin_publish(4);
    REQUIRE(abandoned.ok());
    CHECK((*publisher)->begin_publish(5).status().code() ==
          ErrorCode::kInvalidArgument);  // one writer at a time
  }                                      // destroyed without commit: version 4 never appears
  CHECK((*publisher)->latest_version() == 3);
  std::vector<ScatterEntry> incomplete = {
      {layout.tensors()[0].spec.name, image->data(), layout.tensors()[0].bytes}};
  CHECK((*sub)->pull(Destination::scatter(incomplete)).status().code() == ErrorCode::kInvalidArgument);
  CHECK((*sub)->pull(Destination::contiguous(image->data(), 16)).status().code() ==
        ErrorCode::kInvalidArgument);
  CHECK((*sub)
            ->pull(Destination::contiguous(image->data(), image->size(), MemoryKind::kCuda))
            .status()
            .code() == ErrorCode::kInvalidConfig);
  CHECK((*sub)->status().ok());
  auto stats = (*publisher)->stats();
  CHECK(stats.versions_published == 3);
  // RELEASE has no reply, so the publisher may see the last one a moment later.
  const auto t0 = std::chrono::steady_clock::now();
  while ((*publisher)->stats().leases_active != 0 && seconds_since(t0) < 2.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK((*publisher)->stats().leases_active == 0);
}

TEST_CASE("pubsub: a progress callback that throws fails the pull and retires the connection", "[pubsub]") {
  const auto layout = bytes_layout(8 << 20, 2);
  auto publisher = Publisher::create(layout);
  REQUIRE(publisher.ok());
  publish_pattern(**publisher, 1);
  auto sub = Subscriber::connect((*publisher)->address(), quick_options());
  REQUIRE(sub.ok());
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  PullOptions throwing;
  throwing.on_progress = [](std::uint64_t, std::uint64_t) { throw std::runtime_error("caller bug"); };
  auto failed = (*sub)->pull(Destination::contiguous(image->data(), image->size()), throwing);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == ErrorCode::kInternal);
  CHECK_THAT(failed.status().message(), Catch::Contains("caller bug"));
  // The transfer was cut short mid-stream: the connection must not be reused.
  CHECK((*sub)->status().code() == ErrorCode::kInternal);
  CHECK((*sub)->pull(Destination::contiguous(image->data(), image->size())).status().code() ==
        ErrorCode::kInternal);
  // A new subscriber is served normally.
  auto fresh = Subscriber::connect((*publisher)->address(), quick_options());
  REQUIRE(fresh.ok());
  auto pulled = (*fresh)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK(image_mismatch(layout, image->data(), 1) == -1);
}
