// The transport registry tells the truth: every built transport is listed in
// preference order, and one that cannot work here (verbs without an RDMA
// device) says why and is never chosen, not even when asked for.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <stdlib.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {
bool rdma_device_present() {
  DIR* dir = ::opendir("/sys/class/infiniband");
  if (dir == nullptr) return false;
  bool any = false;
  while (dirent* e = ::readdir(dir)) any = any || e->d_name[0] != '.';
  ::closedir(dir);
  return any;
}
}  // namespace

TEST_CASE("transports: listed best first, and verbs without a device says why and is never chosen",
          "[transports]") {
  const auto transports = available_transports();
  std::vector<std::string> names;
  for (const auto& t : transports) {
    names.push_back(t.name);
    CHECK_FALSE(t.description.empty());
    if (!t.viable) CHECK_FALSE(t.reason.empty());  // every "no" comes with a reason
  }
  CHECK(names == std::vector<std::string>{"verbs", "ucx", "cuda_ipc", "shm", "tcp"});
  for (const auto& t : transports) {
    INFO(t.name);
    // Only cuda_ipc reads CUDA slots and writes CUDA destinations itself; the rest stage.
    CHECK(t.reads_cuda_slots == (t.name == "cuda_ipc"));
    CHECK(t.writes_cuda_memory == (t.name == "cuda_ipc"));
  }
  CHECK(transports.back().viable);  // tcp works everywhere
  if (rdma_device_present()) {
    WARN("this machine has an RDMA device; the no-device half of this test did not run");
    return;
  }
  REQUIRE_FALSE(transports[0].viable);
  auto publisher = Publisher::create(bytes_layout(4096));
  REQUIRE(publisher.ok());
  auto automatic = Subscriber::connect((*publisher)->address(), quick_options(5000, "auto"));
  REQUIRE(automatic.ok());
  CHECK((*automatic)->transport() != "verbs");
  auto forced = Subscriber::connect((*publisher)->address(), quick_options(5000, "verbs"));
  REQUIRE_FALSE(forced.ok());
  CHECK(forced.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(forced.status().message(), Catch::Contains("verbs") && Catch::Contains("not offered"));
}

namespace {
// Sets an environment variable for one scope, restoring the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

bool ucx_viable() {
  for (const auto& t : available_transports()) {
    if (t.name == "ucx") return t.viable;
  }
  return false;
}
}  // namespace

TEST_CASE("slot allocator: memfd by default even under UCX shared memory, and UCX only when asked for",
          "[transports]") {
  {
    // UCX's default transports include tcp: UCX is not offered, memfd slots, shm offered.
    auto publisher = Publisher::create(bytes_layout(1 << 20));
    REQUIRE(publisher.ok());
    CHECK((*publisher)->slot_allocator() == "memfd");
    auto shm = Subscriber::connect((*publisher)->address(), quick_options(5000, "shm"));
    REQUIRE(shm.ok());
  }
  ScopedEnv tls("UCX_TLS", "posix,self");
  if (!ucx_viable()) {
    WARN("UCX is not built or not viable here; the UCX half of this test did not run");
    return;
  }
  {
    // The default stays memfd: UCX-allocated slots would be mapped writable into
    // every ucx subscriber (docs/security.md); shm is the same-host path.
    auto publisher = Publisher::create(bytes_layout(1 << 20));
    REQUIRE(publisher.ok());
    CHECK((*publisher)->slot_allocator() == "memfd");
    auto shm = Subscriber::connect((*publisher)->address(), quick_options(5000, "auto"));
    REQUIRE(shm.ok());
    CHECK((*shm)->transport() == "shm");
  }
  {
    // The explicit opt-in: subscribers are trusted with the slots.
    PublisherOptions trusting;
    trusting.slot_allocator = "ucx";
    auto publisher = Publisher::create(bytes_layout(1 << 20), trusting);
    REQUIRE(publisher.ok());
    CHECK((*publisher)->slot_allocator() == "ucx");
    publish_pattern(**publisher, 1);
    auto ucx = Subscriber::connect((*publisher)->address(), quick_options(5000, "ucx"));
    REQUIRE(ucx.ok());
    auto image = HostBuffer::allocate(1 << 20);
    REQUIRE(image.ok());
    auto pulled = (*ucx)->pull(Destination::contiguous(image->data(), image->size()));
    REQUIRE(pulled.ok());
    CHECK(image_mismatch((*publisher)->layout(), image->data(), 1) < 0);
    // UCX maps the slots here (ucp_rkey_ptr): reads are copies, nothing is registered.
    CHECK((*ucx)->stats().registrations == 0);
    {
      // With the direct path off, the same pull goes through ucp_get_nbx and
      // registers the destination once.
      ScopedEnv get_path("WEIGHTSYNC_UCX_DIRECT", "0");
      auto via_get = Subscriber::connect((*publisher)->address(), quick_options(5000, "ucx"));
      REQUIRE(via_get.ok());
      publish_pattern(**publisher, 2);
      for (int i = 0; i < 2; ++i) {
        PullOptions any_version;
        any_version.newer_than = 0;
        auto again = (*via_get)->pull(Destination::contiguous(image->data(), image->size()), any_version);
        REQUIRE(again.ok());
        CHECK(image_mismatch((*publisher)->layout(), image->data(), 2) < 0);
      }
      CHECK((*via_get)->stats().registrations == 1);
    }
    // UCX owns the memory: the shm transport cannot hand it out and is not offered.
    auto shm = Subscriber::connect((*publisher)->address(), quick_options(5000, "shm"));
    REQUIRE_FALSE(shm.ok());
    CHECK_THAT(shm.status().message(), Catch::Contains("not offered"));
  }
  {
    PublisherOptions options;
    options.slot_allocator = "memfd";
    auto publisher = Publisher::create(bytes_layout(1 << 20), options);
    REQUIRE(publisher.ok());
    CHECK((*publisher)->slot_allocator() == "memfd");
    auto shm = Subscriber::connect((*publisher)->address(), quick_options(5000, "shm"));
    CHECK(shm.ok());
  }
  {
    PublisherOptions options;
    options.slot_allocator = "gpu";
    auto publisher = Publisher::create(bytes_layout(1 << 20), options);
    REQUIRE_FALSE(publisher.ok());
    CHECK(publisher.status().code() == ErrorCode::kInvalidConfig);
    CHECK_THAT(publisher.status().message(), Catch::Contains("auto, memfd, ucx"));
  }
}
