// Encryption for links outside a private fabric (docs/security.md,
// "Encryption"): pulls stay bit-exact over encrypted tcp (full and delta),
// an on-path observer (a real TCP proxy recording both directions) sees
// neither the weights nor the layout, sessions cannot mix encrypted and
// plain by mistake, and transports that cannot be encrypted are not used.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "auth/handshake.h"
#include "auth/integrity.h"
#include "peers.h"
#include "raw_peer.h"
#include "tcp_proxy.h"
#include "weightsync/publisher.h"
#include "weightsync/subscriber.h"
#include "weightsync/transports.h"

using namespace weightsync;
using namespace weightsync::detail;
using namespace wstest;

namespace {

const std::string kSecret = "encryption-test-secret";
const std::string kTensorName = "tensor_name_an_observer_must_not_see";

WeightLayout layout_for_test() {
  auto layout = WeightLayout::build({{kTensorName, DType::kFloat32, {40000}}, {"b", DType::kBFloat16, {1000}}});
  REQUIRE(layout.ok());
  return std::move(*layout);
}

std::unique_ptr<Publisher> make_publisher(const WeightLayout& layout, bool encryption, bool deltas = false) {
  PublisherOptions o;
  o.secret = kSecret;
  o.encryption = encryption;
  o.deltas = deltas;
  auto p = Publisher::create(layout, o);
  REQUIRE(p.ok());
  return std::move(*p);
}

SubscriberOptions options_for(bool encryption, const std::string& transport = "tcp") {
  auto o = quick_options(3000, transport);
  o.secret = kSecret;
  o.encryption = encryption;
  return o;
}

// The image of a version: random bytes (so no window repeats by chance).
std::vector<std::uint8_t> random_image(std::size_t bytes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(bytes);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// Tensor bytes equal (the padding between tensors is not part of a version).
bool same_tensors(const WeightLayout& layout, const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  for (const auto& t : layout.tensors()) {
    if (std::memcmp(a.data() + t.offset, b.data() + t.offset, t.bytes) != 0) return false;
  }
  return true;
}

bool contains(const std::vector<std::uint8_t>& haystack, const std::uint8_t* needle, std::size_t n) {
  return std::search(haystack.begin(), haystack.end(), needle, needle + n) != haystack.end();
}

// How many of 16 windows of 32 bytes of `image` appear in what the proxy saw.
int windows_seen(const std::vector<std::uint8_t>& seen, const std::vector<std::uint8_t>& image) {
  int found = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    const std::size_t at = (160000 - 32) * i / 15;  // inside the first tensor
    found += contains(seen, image.data() + at, 32) ? 1 : 0;
  }
  return found;
}

}  // namespace

TEST_CASE("encryption: full pulls over encrypted tcp are bit-exact and tagged, and shm still serves the same host",
          "[encryption]") {
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm", "auto");
  INFO("transport " << transport);
  const auto layout = layout_for_test();
  auto publisher = make_publisher(layout, true);
  auto sub = Subscriber::connect(publisher->address(), options_for(true, transport));
  REQUIRE(sub.ok());
  CHECK((*sub)->publisher_checksums());  // encryption implies the integrity layer's tags
  CHECK((*sub)->encrypted());
  if (transport != "auto") CHECK((*sub)->transport() == transport);
  std::vector<std::uint8_t> got(layout.total_bytes());
  for (std::uint32_t version = 1; version <= 3; ++version) {
    const auto image = random_image(layout.total_bytes(), version);
    REQUIRE(publisher->publish(version, image.data(), image.size()).ok());
    auto pulled = (*sub)->pull(Destination::contiguous(got.data(), got.size()));
    REQUIRE(pulled.ok());
    CHECK(pulled->version == version);
    CHECK(pulled->checksum_verified);
    CHECK(same_tensors(layout, got, image));
  }
}

TEST_CASE("encryption: delta pulls over encrypted tcp are bit-exact", "[encryption][delta]") {
  const auto layout = layout_for_test();
  auto publisher = make_publisher(layout, true, /*deltas=*/true);
  auto source = random_image(layout.total_bytes(), 11);
  REQUIRE(publisher->publish(1, source.data(), source.size()).ok());
  auto sub = Subscriber::connect(publisher->address(), options_for(true));
  REQUIRE(sub.ok());
  std::vector<std::uint8_t> got(layout.total_bytes());
  REQUIRE((*sub)->pull(Destination::contiguous(got.data(), got.size())).ok());
  for (std::size_t i = 0; i < source.size(); i += 101) source[i] ^= 0x40;
  REQUIRE(publisher->publish(2, source.data(), source.size()).ok());
  PullOptions by_delta;
  by_delta.delta_base = 1;
  by_delta.wait = std::chrono::milliseconds(2000);
  auto pulled = (*sub)->pull(Destination::contiguous(got.data(), got.size()), by_delta);
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 2);
  CHECK(pulled->delta);
  CHECK(same_tensors(layout, got, source));
}

TEST_CASE("encryption: an on-path observer sees neither the weights nor the layout", "[encryption][proxy]") {
  const auto layout = layout_for_test();
  const auto image = random_image(layout.total_bytes(), 99);
  const std::vector<std::uint8_t> name(kTensorName.begin(), kTensorName.end());
  for (bool encryption : {false, true}) {
    INFO("encryption " << encryption);
    auto publisher = make_publisher(layout, encryption);
    REQUIRE(publisher->publish(1, image.data(), image.size()).ok());
    FaultyProxy observer(publisher->port(), 0, 0);  // forwards, records, changes nothing
    auto sub = Subscriber::connect(observer.address(), options_for(encryption));
    REQUIRE(sub.ok());
    CHECK((*sub)->encrypted() == encryption);
    std::vector<std::uint8_t> got(layout.total_bytes());
    auto pulled = (*sub)->pull(Destination::contiguous(got.data(), got.size()));
    REQUIRE(pulled.ok());
    REQUIRE(same_tensors(layout, got, image));
    sub = Status(ErrorCode::kInternal, "closed");
    const auto seen = observer.seen();
    CHECK(seen.size() > image.size());  // the whole version crossed the proxy
    if (encryption) {
      CHECK(windows_seen(seen, image) == 0);
      CHECK_FALSE(contains(seen, name.data(), name.size()));
    } else {
      // The contrast: in the clear, the observer reads both.
      CHECK(windows_seen(seen, image) == 16);
      CHECK(contains(seen, name.data(), name.size()));
    }
  }
}

TEST_CASE("encryption: a session cannot mix encrypted and plain, and it needs a secret", "[encryption]") {
  const auto layout = layout_for_test();
  SECTION("the subscriber asks, the publisher does not encrypt") {
    auto publisher = make_publisher(layout, false);
    auto sub = Subscriber::connect(publisher->address(), options_for(true));
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
    CHECK_THAT(sub.status().message(), Catch::Contains("WEIGHTSYNC_ENCRYPTION"));
  }
  SECTION("the publisher encrypts, the subscriber does not ask") {
    auto publisher = make_publisher(layout, true);
    auto sub = Subscriber::connect(publisher->address(), options_for(false));
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
    CHECK_THAT(sub.status().message(), Catch::Contains("WEIGHTSYNC_ENCRYPTION"));
  }
  SECTION("integrity alone does not satisfy an encrypting publisher") {
    auto publisher = make_publisher(layout, true);
    auto options = options_for(false);
    options.integrity = true;
    auto sub = Subscriber::connect(publisher->address(), options);
    REQUIRE_FALSE(sub.ok());
    CHECK_THAT(sub.status().message(), Catch::Contains("WEIGHTSYNC_ENCRYPTION"));
  }
  SECTION("no secret on either side") {
    PublisherOptions o;
    o.secret = "";
    o.encryption = true;
    auto p = Publisher::create(layout, o);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == ErrorCode::kInvalidConfig);
    auto publisher = make_publisher(layout, false);
    auto options = options_for(true);
    options.secret = "";
    auto sub = Subscriber::connect(publisher->address(), options);
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
  }
}

TEST_CASE("encryption: one-sided transports are neither offered nor used", "[encryption]") {
  const auto layout = layout_for_test();
  auto publisher = make_publisher(layout, true);
  for (const char* one_sided : {"ucx", "verbs"}) {
    INFO(one_sided);
    auto sub = Subscriber::connect(publisher->address(), options_for(true, one_sided));
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidConfig);
    // Where the library has the transport, the reason is the encryption.
    bool built = false;
    for (const auto& t : available_transports()) built = built || t.name == one_sided;
    if (built) CHECK_THAT(sub.status().message(), Catch::Contains("cannot be encrypted"));
  }
}

namespace {

// Waits until the publisher closes `s` (EOF or reset on a raw read); false
// if it is still open after `limit`.
bool closed_within(const Socket& s, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::uint8_t buf[4096];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(s.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

// An authenticated control connection that asked for encryption, as the
// library's client does it, but driven by hand.
struct RawEncryptedSession {
  Socket socket;
  HandshakeOutcome outcome;
  std::uint64_t session = 0;
};

RawEncryptedSession raw_encrypted_session(const Publisher& publisher, bool turn_on_records) {
  RawEncryptedSession r;
  r.socket = raw_connect(publisher.address());
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  auto session = client_handshake(r.socket, kSecret, Role::kControl, 0, "raw", deadline,
                                  hello_features(Role::kControl, true, true), &r.outcome);
  REQUIRE(session.ok());
  r.session = *session;
  if (turn_on_records) {
    REQUIRE(enable_encryption(r.socket, kSecret, r.session, r.outcome.client_nonce, r.outcome.server_nonce, false)
                .ok());
  }
  return r;
}

}  // namespace

TEST_CASE("hostile peers: an encrypted session's peer that sends plaintext, a forged record, or two requests in "
          "one record is cut off or served, and a good subscriber is not disturbed",
          "[encryption][hostile]") {
  const auto layout = layout_for_test();
  auto publisher = make_publisher(layout, true);
  const auto image = random_image(layout.total_bytes(), 5);
  REQUIRE(publisher->publish(1, image.data(), image.size()).ok());
  auto good = Subscriber::connect(publisher->address(), options_for(true));
  REQUIRE(good.ok());
  std::vector<std::uint8_t> got(layout.total_bytes());
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  SECTION("plaintext frames after WELCOME") {
    auto raw = raw_encrypted_session(*publisher, false);
    REQUIRE(write_frame(raw.socket, MsgType::kGetLayout, {}, deadline, "p").ok());
    CHECK(closed_within(raw.socket, std::chrono::seconds(5)));
  }
  SECTION("a record under a key of its own making") {
    auto raw = raw_encrypted_session(*publisher, false);
    RecordKey forged;
    forged.key[0] = 7;
    auto records = RecordLayer::create(forged, forged);
    REQUIRE(records.ok());
    raw.socket.enable_records(std::move(*records));
    REQUIRE(write_frame(raw.socket, MsgType::kGetLayout, {}, deadline, "p").ok());
    CHECK(closed_within(raw.socket, std::chrono::seconds(5)));
  }
  SECTION("two sealed requests packed into one record are both answered") {
    auto raw = raw_encrypted_session(*publisher, true);
    auto keys = derive_session_keys(kSecret, raw.session, raw.outcome.client_nonce, raw.outcome.server_nonce);
    REQUIRE(keys.ok());
    FrameSeal seal(keys->to_publisher, keys->to_subscriber);
    std::vector<std::uint8_t> both;
    for (MsgType type : {MsgType::kGetLayout, MsgType::kGetSlotTable}) {
      std::vector<std::uint8_t> payload;
      REQUIRE(seal.seal(type, payload).ok());
      std::uint8_t header[kFrameHeaderBytes];
      encode_header(type, static_cast<std::uint32_t>(payload.size()), header);
      both.insert(both.end(), header, header + kFrameHeaderBytes);
      both.insert(both.end(), payload.begin(), payload.end());
    }
    REQUIRE(send_all(raw.socket, both.data(), both.size(), deadline, "p").ok());
    REQUIRE(raw.socket.records()->records_sent() == 1);
    CHECK(read_expected_sealed(raw.socket, &seal, MsgType::kLayout, kMaxReplyPayload, deadline, "p").ok());
    CHECK(read_expected_sealed(raw.socket, &seal, MsgType::kSlotTable, kMaxReplyPayload, deadline, "p").ok());
  }
  auto pulled = (*good)->pull(Destination::contiguous(got.data(), got.size()));
  REQUIRE(pulled.ok());
  CHECK(same_tensors(layout, got, image));
  CHECK(publisher->stats().serving);
}
