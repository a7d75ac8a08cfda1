// Host identity (common/host_identity.h): boot id + network namespace by
// default, WEIGHTSYNC_HOST_ID when set, and a malformed override is a clear
// kInvalidConfig on both sides. The cross-namespace half (two network
// namespaces of one kernel are two hosts) runs in tests/testbed/.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "common/host_identity.h"
#include "peers.h"

using namespace weightsync;
using namespace wstest;

namespace {

// Sets (or with nullptr unsets) an environment variable for one scope.
class EnvOverride {
 public:
  EnvOverride(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvOverride() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void check_refused(const Status& status) {
  INFO(status.to_string());
  CHECK(status.code() == ErrorCode::kInvalidConfig);
  CHECK(status.message().find("WEIGHTSYNC_HOST_ID") != std::string::npos);
}

}  // namespace

TEST_CASE("host identity: the kernel's boot id and this network namespace by default", "[host-identity]") {
  EnvOverride unset("WEIGHTSYNC_HOST_ID", nullptr);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  REQUIRE(static_cast<bool>(in >> boot));
  struct stat ns {};
  REQUIRE(::stat("/proc/self/ns/net", &ns) == 0);
  auto id = detail::host_identity();
  REQUIRE(id.ok());
  CHECK(*id == boot + ":" + std::to_string(static_cast<unsigned long long>(ns.st_ino)));
  CHECK(id->size() <= detail::kMaxHostIdBytes);  // fits ShmOffer's wire field
  EnvOverride empty("WEIGHTSYNC_HOST_ID", "");   // empty is unset, like every WEIGHTSYNC_* variable
  CHECK(detail::host_identity().value() == *id);
}

TEST_CASE("host identity: WEIGHTSYNC_HOST_ID overrides it, up to 64 characters", "[host-identity]") {
  {
    EnvOverride set("WEIGHTSYNC_HOST_ID", "rack7-node3.pod_2:a");
    auto id = detail::host_identity();
    REQUIRE(id.ok());
    CHECK(*id == "rack7-node3.pod_2:a");
  }
  const std::string longest(64, 'x');
  EnvOverride set("WEIGHTSYNC_HOST_ID", longest.c_str());
  auto id = detail::host_identity();
  REQUIRE(id.ok());
  CHECK(*id == longest);
}

TEST_CASE("host identity: a malformed or over-long WEIGHTSYNC_HOST_ID is kInvalidConfig naming it",
          "[host-identity]") {
  const std::string too_long(65, 'x');
  for (const std::string& bad : {too_long, std::string("two words"), std::string("a/b"), std::string("tab\there"),
                                 std::string("new\nline"), std::string("caf\xc3\xa9")}) {
    INFO("WEIGHTSYNC_HOST_ID='" << bad << "'");
    EnvOverride set("WEIGHTSYNC_HOST_ID", bad.c_str());
    auto id = detail::host_identity();
    REQUIRE_FALSE(id.ok());
    check_refused(id.status());
  }
  // ...and neither side starts with it.
  EnvOverride set("WEIGHTSYNC_HOST_ID", too_long.c_str());
  auto publisher = Publisher::create(bytes_layout(4096, 1));
  REQUIRE_FALSE(publisher.ok());
  check_refused(publisher.status());
}

TEST_CASE("host identity: a subscriber with a malformed WEIGHTSYNC_HOST_ID fails to connect, naming it",
          "[host-identity]") {
  auto publisher = Publisher::create(bytes_layout(4096, 1));
  REQUIRE(publisher.ok());
  publish_pattern(**publisher, 1);
  EnvOverride set("WEIGHTSYNC_HOST_ID", "not a host id");
  auto sub = Subscriber::connect((*publisher)->address(), quick_options(5000, "auto"));
  REQUIRE_FALSE(sub.ok());
  check_refused(sub.status());
}

TEST_CASE("host identity: peers with equal WEIGHTSYNC_HOST_ID use shm, with different ones tcp",
          "[host-identity]") {
  // The publisher is another process with its own WEIGHTSYNC_HOST_ID; this
  // process is the subscriber. One kernel, one network namespace: only the
  // override tells them apart.
  auto run = [](const char* publisher_id, const char* subscriber_id) {
    auto child = ChildProcess::spawn({peer_path(), "publish", "--size", "65536", "--tensors", "1"},
                                     {std::string("WEIGHTSYNC_HOST_ID=") + publisher_id});
    auto address = child.wait_for("ADDRESS ", std::chrono::seconds(20));
    REQUIRE(address.has_value());
    REQUIRE(child.wait_for("PUBLISHED 1", std::chrono::seconds(20)).has_value());
    EnvOverride set("WEIGHTSYNC_HOST_ID", subscriber_id);
    auto sub = Subscriber::connect(*address, quick_options(5000, "auto"));
    INFO(sub.status().to_string());
    REQUIRE(sub.ok());
    auto image = HostBuffer::allocate((*sub)->layout().total_bytes());
    REQUIRE(image.ok());
    auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
    REQUIRE(pulled.ok());
    CHECK(image_mismatch((*sub)->layout(), image->data(), pulled->version) == -1);
    // Asked for explicitly, shm either works (same host) or is refused
    // because the identities differ, never tried and failed.
    auto shm = Subscriber::connect(*address, quick_options(5000, "shm"));
    return std::make_pair((*sub)->transport(), shm.ok() ? Status() : shm.status());
  };
  bool shm_viable = false;
  for (const auto& t : available_transports()) {
    if (t.name == "shm") shm_viable = t.viable;
  }
  if (shm_viable) {
    auto same = run("node-a", "node-a");
    INFO(same.second.to_string());
    CHECK(same.second.ok());
  }
  auto apart = run("node-a", "node-b");
  CHECK(apart.first != "shm");
  INFO(apart.second.to_string());
  CHECK(apart.second.code() == ErrorCode::kInvalidConfig);
  CHECK(apart.second.message().find("another host") != std::string::npos);
}
