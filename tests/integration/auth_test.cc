// Authentication: wrong or missing secrets are refused with a clear error and
// learn nothing; without a secret the publisher stays on loopback.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>

#include "auth/handshake.h"
#include "net/socket.h"
#include "peers.h"
#include "wire/frame_io.h"

using namespace weightsync;
using namespace wstest;

namespace {

std::unique_ptr<Publisher> publisher_with_secret(const std::string& secret) {
  PublisherOptions options;
  options.secret = secret;
  options.io_timeout_ms = 2000;
  auto p = Publisher::create(bytes_layout(4096, 2), options);
  REQUIRE(p.ok());
  auto writer = (*p)->begin_publish(1);
  REQUIRE(writer.ok());
  REQUIRE(writer->commit().ok());
  return std::move(*p);
}

// A non-loopback IPv4 address of this machine, if it has one.
std::string non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char host[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, host, sizeof(host));
    if (!detail::is_loopback_host(host)) found = host;
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace

TEST_CASE("auth: a wrong secret is refused with a clear error and learns nothing", "[auth]") {
  auto publisher = publisher_with_secret("correct horse battery staple");
  SubscriberOptions wrong = quick_options();
  wrong.secret = "tr0ub4dor&3";
  auto refused = Subscriber::connect(publisher->address(), wrong);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kAuthFailed);
  CHECK(refused.status().action() == Action::kFixConfiguration);
  CHECK_THAT(refused.status().message(), Catch::Contains("WEIGHTSYNC_SECRET"));

  // At the protocol level: after a bad AUTH the only thing sent is ERROR, then
  // the connection closes; no LAYOUT, even when asked.
  using namespace weightsync::detail;
  auto target = parse_host_port(publisher->address());
  REQUIRE(target.ok());
  auto raw = connect_tcp(*target, Deadline::after(std::chrono::seconds(2)));
  REQUIRE(raw.ok());
  const auto deadline = Deadline::after(std::chrono::seconds(2));
  REQUIRE(
      write_frame(*raw, MsgType::kHello, HelloMsg{Role::kControl, 0, {}, "intruder"}.encode(), deadline, "p")
          .ok());
  auto challenge = read_frame(*raw, kMaxReplyPayload, deadline, deadline, "p");
  REQUIRE(challenge.ok());
  CHECK(challenge->type == MsgType::kChallenge);
  AuthMsg forged;
  forged.client_mac.fill(0x42);
  REQUIRE(write_frame(*raw, MsgType::kAuth, forged.encode(), deadline, "p").ok());
  (void)write_frame(*raw, MsgType::kGetLayout, {}, deadline, "p");
  auto answer = read_frame(*raw, kMaxReplyPayload, deadline, deadline, "p");
  REQUIRE(answer.ok());
  CHECK(answer->type == MsgType::kError);
  auto after = read_frame(*raw, kMaxReplyPayload, deadline, deadline, "p");
  REQUIRE_FALSE(after.ok());
  CHECK(after.status().code() == ErrorCode::kConnectionLost);

  // A request before any handshake gets nothing either.
  auto eager = connect_tcp(*target, Deadline::after(std::chrono::seconds(2)));
  REQUIRE(eager.ok());
  REQUIRE(write_frame(*eager, MsgType::kGetLayout, {}, deadline, "p").ok());
  auto eager_answer = read_frame(*eager, kMaxReplyPayload, deadline, deadline, "p");
  if (eager_answer.ok()) CHECK(eager_answer->type == MsgType::kError);
  auto eager_after = read_frame(*eager, kMaxReplyPayload, deadline, deadline, "p");
  CHECK_FALSE(eager_after.ok());

  CHECK(publisher->stats().auth_failures == 2);
  // The right secret still works.
  SubscriberOptions right = quick_options();
  right.secret = "correct horse battery staple";
  auto ok = Subscriber::connect(publisher->address(), right);
  REQUIRE(ok.ok());
  CHECK(*(*ok)->latest_version() == 1);
}

TEST_CASE("auth: a missing secret on either side is refused", "[auth]") {
  auto secured = publisher_with_secret("s3cret");
  auto no_secret = Subscriber::connect(secured->address(), [] {
    auto o = quick_options();
    o.secret = "";
    return o;
  }());
  REQUIRE_FALSE(no_secret.ok());
  CHECK(no_secret.status().code() == ErrorCode::kAuthFailed);
  CHECK_THAT(no_secret.status().message(), Catch::Contains("requires authentication"));

  auto open = publisher_with_secret("");
  auto o = quick_options();
  o.secret = "s3cret";
  auto suspicious = Subscriber::connect(open->address(), o);
  REQUIRE_FALSE(suspicious.ok());
  CHECK(suspicious.status().code() == ErrorCode::kAuthFailed);
  CHECK_THAT(suspicious.status().message(), Catch::Contains("does not authenticate"));
}

TEST_CASE("auth: the secret can come from WEIGHTSYNC_SECRET", "[auth]") {
  ::setenv("WEIGHTSYNC_SECRET", "from-the-environment", 1);
  auto publisher = Publisher::create(bytes_layout(64));
  REQUIRE(publisher.ok());
  auto sub = Subscriber::connect((*publisher)->address(), quick_options());
  CHECK(sub.ok());
  auto o = quick_options();
  o.secret = "an-option-overrides-the-environment";
  auto refused = Subscriber::connect((*publisher)->address(), o);
  CHECK(refused.status().code() == ErrorCode::kAuthFailed);
  ::unsetenv("WEIGHTSYNC_SECRET");
}

TEST_CASE("auth: without a secret the publisher is not reachable on a non-loopback address", "[auth]") {
  ::unsetenv("WEIGHTSYNC_SECRET");
  PublisherOptions everywhere;
  everywhere.bind_address = "0.0.0.0";
  auto refused = Publisher::create(bytes_layout(64), everywhere);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(refused.status().message(), Catch::Contains("without a secret"));

  auto publisher = Publisher::create(bytes_layout(64));
  REQUIRE(publisher.ok());
  CHECK((*publisher)->address().rfind("127.0.0.1:", 0) == 0);
  const std::string external = non_loopback_ipv4();
  if (external.empty()) {
    WARN("this machine has no non-loopback IPv4 address; the reachability half of this test did not run");
  } else {
    auto attempt =
        Subscriber::connect(external + ":" + std::to_string((*publisher)->port()), quick_options());
    REQUIRE_FALSE(attempt.ok());
    CHECK(attempt.status().code() == ErrorCode::kConnectionLost);
  }
  // With a secret, binding everywhere is allowed.
  everywhere.secret = "s3cret";
  CHECK(Publisher::create(bytes_layout(64), everywhere).ok());
}
