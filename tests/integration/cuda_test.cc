// CUDA memory through the public API. Where no CUDA device can be used (the
// build machines), every CUDA entry point must refuse with the reason and
// leave the publisher and subscriber working; where one can, device
// publishes and pulls into device memory must be bit-exact. Each case runs
// the branch that matches the machine and says which in its output.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "cuda/cuda_runtime.h"
#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {

Result<std::unique_ptr<Publisher>> host_publisher(std::uint64_t size, int tensors) {
  PublisherOptions options;
  options.slots = 3;
  options.secret = "";
  return Publisher::create(bytes_layout(size, tensors), options);
}

std::vector<char> pattern_image(const WeightLayout& layout, std::uint64_t version) {
  std::vector<char> image(layout.total_bytes());
  for (const auto& t : layout.tensors()) fill_pattern(image.data() + t.offset, t.bytes, version, t.offset);
  return image;
}

}  // namespace

TEST_CASE("cuda_info says whether CUDA can be used here, and why not", "[cuda]") {
  const CudaInfo info = cuda_info();
#ifdef WS_TEST_HAVE_CUDA
  CHECK(info.built);
  CHECK(info.runtime_version > 0);
#else
  CHECK_FALSE(info.built);
#endif
  if (info.usable) {
    WARN("CUDA device: " << info.device_name);
    CHECK(info.device_count > 0);
    CHECK(info.reason.empty());
  } else {
    WARN("no CUDA here: " << info.reason);
    CHECK_FALSE(info.reason.empty());
    CHECK(detail::cuda_ready().code() == ErrorCode::kInvalidConfig);
    CHECK(detail::cuda_ready().message().find(info.reason) != std::string::npos);
  }
}

TEST_CASE("CUDA slots: refused with the reason without a device, served by cuda_ipc only with one",
          "[cuda]") {
  PublisherOptions options;
  options.slot_memory = MemoryKind::kCuda;
  auto publisher = Publisher::create(bytes_layout(1 << 20, 2), options);
  const CudaInfo info = cuda_info();
  if (!info.usable) {
    REQUIRE_FALSE(publisher.ok());
    CHECK(publisher.status().code() == ErrorCode::kInvalidConfig);
    CHECK(publisher.status().message().find(info.reason) != std::string::npos);
    return;
  }
  REQUIRE(publisher.ok());
  CHECK((*publisher)->slot_allocator() == "cuda");
  // Checksums need host slots.
  options.checksum = true;
  auto with_checksums = Publisher::create(bytes_layout(1 << 20, 2), options);
  CHECK(with_checksums.status().code() == ErrorCode::kInvalidConfig);
  // A host image is copied into the device slot.
  const auto image = pattern_image((*publisher)->layout(), 1);
  REQUIRE((*publisher)->publish(1, image.data(), image.size()).ok());
}

TEST_CASE("device publishes: refused without a device (the publisher keeps working), bit-exact with one",
          "[cuda]") {
  auto publisher = host_publisher((1 << 20) + 13, 3);
  REQUIRE(publisher.ok());
  const WeightLayout& layout = (*publisher)->layout();
  const auto image = pattern_image(layout, 1);
  const CudaInfo info = cuda_info();
  if (!info.usable) {
    std::vector<char> not_device(layout.total_bytes());
    auto ticket = (*publisher)->publish_from_device(1, not_device.data(), not_device.size());
    REQUIRE_FALSE(ticket.ok());
    CHECK(ticket.status().code() == ErrorCode::kInvalidConfig);
    CHECK(ticket.status().message().find(info.reason) != std::string::npos);
    CHECK((*publisher)->flush_device_publishes(std::chrono::milliseconds(10)).status().code() ==
          ErrorCode::kNotReady);
    // Nothing was reserved or lost: the host path publishes version 1.
    REQUIRE((*publisher)->publish(1, image.data(), image.size()).ok());
    CHECK((*publisher)->latest_version() == 1);
    return;
  }
  auto device = detail::DeviceMemory::allocate(layout.total_bytes());
  REQUIRE(device.ok());
  REQUIRE(detail::copy_sync(device->data(), image.data(), image.size()).ok());
  auto ticket = (*publisher)->publish_from_device(1, device->data(), layout.total_bytes());
  INFO(ticket.status().to_string());
  REQUIRE(ticket.ok());
  auto committed = (*publisher)->flush_device_publishes();
  REQUIRE(committed.ok());
  CHECK(committed->version == 1);
  CHECK((*publisher)->latest_version() == 1);
  // Host memory is refused as a device source.
  CHECK((*publisher)->publish_from_device(2, image.data(), image.size()).status().code() ==
        ErrorCode::kInvalidArgument);
  auto sub = Subscriber::connect((*publisher)->address(), quick_options(5000, "tcp"));
  REQUIRE(sub.ok());
  std::vector<char> pulled(layout.total_bytes());
  REQUIRE((*sub)->pull(Destination::contiguous(pulled.data(), pulled.size())).ok());
  CHECK(image_mismatch(layout, pulled.data(), 1) == -1);
}

TEST_CASE("CUDA destinations: refused without a device (the subscriber keeps working), staged with one",
          "[cuda]") {
  auto publisher = host_publisher((1 << 20) + 13, 3);
  REQUIRE(publisher.ok());
  const WeightLayout& layout = (*publisher)->layout();
  const auto image = pattern_image(layout, 1);
  REQUIRE((*publisher)->publish(1, image.data(), image.size()).ok());
  auto sub = Subscriber::connect((*publisher)->address(), quick_options(5000, "tcp"));
  REQUIRE(sub.ok());
  const CudaInfo info = cuda_info();
  std::vector<char> host(layout.total_bytes());
  if (!info.usable) {
    auto pulled = (*sub)->pull(Destination::contiguous(host.data(), host.size(), MemoryKind::kCuda));
    REQUIRE_FALSE(pulled.ok());
    CHECK(pulled.status().code() == ErrorCode::kInvalidConfig);
    CHECK(pulled.status().message().find(info.reason) != std::string::npos);
    CHECK((*sub)->status().ok());  // not sticky: an argument error
    REQUIRE((*sub)->pull(Destination::contiguous(host.data(), host.size())).ok());
    CHECK(image_mismatch(layout, host.data(), 1) == -1);
    return;
  }
  // Host memory declared kCuda is refused, naming the mistake.
  auto wrong = (*sub)->pull(Destination::contiguous(host.data(), host.size(), MemoryKind::kCuda));
  CHECK(wrong.status().code() == ErrorCode::kInvalidArgument);
  auto device = detail::DeviceMemory::allocate(layout.total_bytes());
  REQUIRE(device.ok());
  auto pulled =
      (*sub)->pull(Destination::contiguous(device->data(), layout.total_bytes(), MemoryKind::kCuda));
  INFO(pulled.status().to_string());
  REQUIRE(pulled.ok());
  CHECK(pulled->staged);
  REQUIRE(detail::copy_sync(host.data(), device->data(), host.size()).ok());
  CHECK(image_mismatch(layout, host.data(), 1) == -1);
}

TEST_CASE("staging options are checked at connect", "[cuda]") {
  auto publisher = host_publisher(4096, 1);
  REQUIRE(publisher.ok());
  auto options = quick_options(5000, "tcp");
  options.staging_chunks = 1;
  auto sub = Subscriber::connect((*publisher)->address(), options);
  REQUIRE_FALSE(sub.ok());
  CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
  CHECK(sub.status().message().find("at least 2 chunks") != std::string::npos);
}
