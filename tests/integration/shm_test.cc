// The shared-memory transport's own guarantees: negotiation (same host only,
// explicit requests honoured, refusals explained) and the local socket's
// security (authenticated, role-checked, read-only descriptors).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>

#include <unistd.h>
#include <algorithm>

#include "auth/handshake.h"
#include "common/host_identity.h"
#include "net/unix_socket.h"
#include "peers.h"
#include "subscriber/control_client.h"
#include "subscriber/negotiation.h"
#include "wire/frame_io.h"

using namespace weightsync;
using namespace weightsync::detail;
using namespace wstest;

namespace {

const std::string kSecret = "shm-test-secret";

std::unique_ptr<Publisher> secured_publisher(const WeightLayout& layout) {
  PublisherOptions options;
  options.secret = kSecret;
  options.io_timeout_ms = 2000;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  publish_pattern(**publisher, 1);
  return std::move(*publisher);
}

bool shm_viable() {
  for (const auto& t : available_transports()) {
    if (t.name == "shm") return t.viable;
  }
  return false;
}

}  // namespace

TEST_CASE("shm: negotiation takes shm on the same host, honours requests and explains refusals", "[shm]") {
  if (!shm_viable()) {
    WARN("shm is not viable on this machine; only the refusal half of this test ran");
  }
  const auto layout = bytes_layout(1 << 20, 2);
  auto publisher = secured_publisher(layout);
  SubscriberOptions options = quick_options(5000, "auto");
  options.secret = kSecret;
  auto automatic = Subscriber::connect(publisher->address(), options);
  REQUIRE(automatic.ok());
  // The publisher offers every transport this build has: auto takes the
  // first viable one in preference order.
  std::string best;
  for (const auto& t : available_transports()) {
    if (t.viable && best.empty()) best = t.name;
  }
  CHECK((*automatic)->transport() == best);
  options.transport = "shm";
  if (shm_viable()) {
    auto shm = Subscriber::connect(publisher->address(), options);
    REQUIRE(shm.ok());
    CHECK((*shm)->transport() == "shm");
  }

  options.transport = "tcp";
  auto tcp = Subscriber::connect(publisher->address(), options);
  REQUIRE(tcp.ok());
  CHECK((*tcp)->transport() == "tcp");

  options.transport = "carrier-pigeon";
  auto unknown = Subscriber::connect(publisher->address(), options);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(unknown.status().message(), Catch::Contains("available: auto") && Catch::Contains("tcp"));

  // An offer from another host (another boot id) is never tried: with "auto"
  // negotiation falls back to tcp; asked for explicitly, it says why not.
  auto target = parse_host_port(publisher->address());
  REQUIRE(target.ok());
  auto control = ControlClient::connect(*target, kSecret, "negotiation-test", 5000, 5000);
  REQUIRE(control.ok());
  NegotiationInput input;
  input.requested = "auto";
  input.offers = {{"shm", ShmOffer{"a-different-boot-id", "weightsync-nowhere"}.encode()}, {"tcp", {}}};
  input.publisher = *target;
  input.secret = kSecret;
  input.session_id = control->session_id();
  input.client_name = "negotiation-test";
  input.slot_count = 3;
  input.slot_bytes = layout.total_bytes();
  auto fallback = negotiate_transport(input);
  REQUIRE(fallback.ok());
  CHECK(std::string((*fallback)->name()) == "tcp");
  input.requested = "shm";
  auto refused = negotiate_transport(input);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(refused.status().message(), Catch::Contains("another host") || Catch::Contains("not viable"));
}

TEST_CASE("shm: the local socket is authenticated, role-checked, and hands out read-only memory", "[shm]") {
  if (!shm_viable()) {
    WARN("shm is not viable on this machine; this test did not run");
    return;
  }
  const auto layout = bytes_layout(1 << 20, 2);
  auto publisher = secured_publisher(layout);
  auto target = parse_host_port(publisher->address());
  REQUIRE(target.ok());
  auto control = ControlClient::connect(*target, kSecret, "shm-test", 5000, 5000);
  REQUIRE(control.ok());
  auto table = control->get_slot_table();
  REQUIRE(table.ok());
  REQUIRE(table->transports.size() >= 2);
  CHECK(table->transports.back().name == "tcp");  // offered last, the fallback
  auto shm_offer = std::find_if(table->transports.begin(), table->transports.end(),
                                [](const TransportOffer& o) { return o.name == "shm"; });
  REQUIRE(shm_offer != table->transports.end());
  auto offer = ShmOffer::decode(shm_offer->blob);
  REQUIRE(offer.ok());
  CHECK(offer->boot_id == *host_identity());  // boot id + network namespace (or WEIGHTSYNC_HOST_ID)
  CHECK(offer->socket_name.size() >= 32);  // random, not guessable
  const auto deadline = Deadline::after(std::chrono::seconds(2));

  // A wrong secret on the local socket: ERROR, no descriptors.
  auto intruder = connect_unix_abstract(offer->socket_name, deadline);
  REQUIRE(intruder.ok());
  auto refused =
      client_handshake(*intruder, "wrong", Role::kShm, control->session_id(), "intruder", deadline);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kAuthFailed);

  // The control role is not served on the local socket, nor the shm role on TCP.
  auto wrong_role = connect_unix_abstract(offer->socket_name, deadline);
  REQUIRE(wrong_role.ok());
  auto hs = client_handshake(*wrong_role, kSecret, Role::kControl, 0, "confused", deadline);
  if (hs.ok()) {
    auto reply = read_frame(*wrong_role, kMaxReplyPayload, deadline, deadline, "publisher");
    REQUIRE(reply.ok());
    CHECK(reply->type == MsgType::kError);
  }
  auto tcp_shm = connect_tcp(*target, deadline);
  REQUIRE(tcp_shm.ok());
  // Refused in the handshake: no WELCOME, no descriptors.
  auto tcp_hs = client_handshake(*tcp_shm, kSecret, Role::kShm, control->session_id(), "confused", deadline);
  REQUIRE_FALSE(tcp_hs.ok());
  CHECK(tcp_hs.status().code() == ErrorCode::kProtocolError);
  CHECK(tcp_hs.status().message().find("local socket") != std::string::npos);

  // The real thing: descriptors arrive, and they map for reading only.
  auto local = connect_unix_abstract(offer->socket_name, deadline);
  REQUIRE(local.ok());
  REQUIRE(client_handshake(*local, kSecret, Role::kShm, control->session_id(), "reader", deadline).ok());
  auto regions = read_expected(*local, MsgType::kShmRegions, kMaxReplyPayload, deadline, "publisher");
  REQUIRE(regions.ok());
  auto msg = ShmRegionsMsg::decode(regions->payload);
  REQUIRE(msg.ok());
  auto fds = recv_fds(*local, msg->slot_count + 1, deadline, "publisher");
  REQUIRE(fds.ok());
  for (int fd : *fds) {
    void* writable = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(writable == MAP_FAILED);
    void* readable = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(readable != MAP_FAILED);
    if (readable != MAP_FAILED) ::munmap(readable, 4096);
    CHECK(::write(fd, "x", 1) < 0);
    // Reopening the descriptor read-write through /proc does not help: the
    // memfd is sealed against new writable mappings, writes and resizing.
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    int rw = ::open(path.c_str(), O_RDWR);
    if (rw >= 0) {
      CHECK(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) == MAP_FAILED);
      CHECK(::write(rw, "x", 1) < 0);
      CHECK(::ftruncate(rw, 0) != 0);
      ::close(rw);
    }
    ::close(fd);
  }
  // A data connection for a session that does not exist gets nothing.
  auto orphan = connect_unix_abstract(offer->socket_name, deadline);
  REQUIRE(orphan.ok());
  CHECK_FALSE(client_handshake(*orphan, kSecret, Role::kShm, 42, "orphan", deadline).ok());
}
