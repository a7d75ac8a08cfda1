// The transport registry tells the truth: every built transport is listed in
// preference order, and one that cannot work here (verbs without an RDMA
// device) says why and is never chosen, not even when asked for.
#include <catch2/catch.hpp>

#include <dirent.h>

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
  CHECK(names == std::vector<std::string>{"verbs", "ucx", "shm", "tcp"});
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
