// LoRA adapters as their own versions (weightsync/adapter_publisher.h): many
// named adapters behind one address, each with its own ring and version
// stream; a subscriber bound to one adapter gets exactly its newest complete
// versions, over shm and tcp. And the attacks: unknown, over-long and many
// names, a second SELECT_STREAM, a lease of adapter B presented by a session
// of adapter A, and the bounds of add_adapter().
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <thread>

#include "auth/handshake.h"
#include "common/byte_codec.h"
#include "peers.h"
#include "raw_peer.h"
#include "weightsync/adapter_publisher.h"
#include "wire/stream_messages.h"

using namespace weightsync;
using namespace weightsync::detail;
using namespace wstest;

namespace {

const std::string kSecret = "adapter-test-secret";

// Each adapter's bytes differ from every other's at the same version number.
std::uint64_t tagged(std::uint64_t version, std::uint64_t adapter) {
  return version | (adapter << 24);
}

void publish_adapter(Publisher& publisher, std::uint64_t version, std::uint64_t adapter) {
  auto writer = publisher.begin_publish(version);
  REQUIRE(writer.ok());
  for (const auto& t : publisher.layout().tensors()) {
    fill_pattern(static_cast<char*>(writer->data()) + t.offset, t.bytes, tagged(version, adapter), t.offset);
  }
  REQUIRE(writer->commit().ok());
}

// -1 when `image` holds exactly `adapter`'s `version`.
std::int64_t adapter_mismatch(const WeightLayout& layout, const void* image, std::uint64_t version,
                              std::uint64_t adapter) {
  for (const auto& t : layout.tensors()) {
    const auto* p = static_cast<const std::uint8_t*>(image) + t.offset;
    if (auto at = find_mismatch(p, t.bytes, tagged(version, adapter), t.offset); at >= 0) {
      return static_cast<std::int64_t>(t.offset) + at;
    }
  }
  return -1;
}

AdapterPublisherOptions adapter_options() {
  AdapterPublisherOptions options;
  options.publisher.secret = kSecret;
  options.publisher.io_timeout_ms = 5000;
  return options;
}

SubscriberOptions adapter_subscriber(const std::string& adapter, const std::string& transport = "tcp") {
  SubscriberOptions o = quick_options(5000, transport);
  o.secret = kSecret;
  o.adapter = adapter;
  return o;
}

std::vector<std::uint8_t> framed(MsgType type, const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out(kFrameHeaderBytes);
  encode_header(type, static_cast<std::uint32_t>(payload.size()), out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// An authenticated raw control session.
Socket raw_session(const std::string& address, std::uint64_t* session = nullptr) {
  Socket s = raw_connect(address);
  auto id = client_handshake(s, kSecret, Role::kControl, 0, "raw", Deadline::after(std::chrono::seconds(5)));
  REQUIRE(id.ok());
  if (session != nullptr) *session = *id;
  return s;
}

// The publisher's answer to SELECT_STREAM with these payload bytes.
Result<Frame> raw_select(const Socket& s, const std::vector<std::uint8_t>& payload) {
  send_bytes(s, framed(MsgType::kSelectStream, payload));
  return read_expected(s, MsgType::kStreamSelected, kMaxReplyPayload,
                       Deadline::after(std::chrono::seconds(5)), "publisher");
}

std::vector<std::uint8_t> name_payload(const std::string& name) {
  ByteWriter w;
  w.str16(name);
  return w.take();
}

}  // namespace

TEST_CASE(
    "adapters: two adapters with interleaved publishes, each subscriber gets its adapter's newest versions",
    "[adapters]") {
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  INFO("transport " << transport);
  auto made = AdapterPublisher::create(adapter_options());
  REQUIRE(made.ok());
  AdapterPublisher& pub = **made;
  CHECK(pub.base() == nullptr);
  const WeightLayout math_layout = bytes_layout((1 << 20) + 24, 3);
  const WeightLayout tool_layout = bytes_layout(300000, 2);
  auto math = pub.add_adapter("math-v2", math_layout);
  auto tool = pub.add_adapter("tool-use", tool_layout);
  REQUIRE(math.ok());
  REQUIRE(tool.ok());
  CHECK(pub.adapter_names() == std::vector<std::string>{"math-v2", "tool-use"});
  CHECK((*math)->address() == pub.address());

  auto math_sub = Subscriber::connect(pub.address(), adapter_subscriber("math-v2", transport));
  auto tool_sub = Subscriber::connect(pub.address(), adapter_subscriber("tool-use", transport));
  REQUIRE(math_sub.ok());
  REQUIRE(tool_sub.ok());
  CHECK((*math_sub)->transport() == transport);
  CHECK((*tool_sub)->transport() == transport);
  CHECK((*math_sub)->layout() == math_layout);
  CHECK((*tool_sub)->layout() == tool_layout);

  auto math_buf = HostBuffer::allocate(math_layout.total_bytes());
  auto tool_buf = HostBuffer::allocate(tool_layout.total_bytes());
  REQUIRE(math_buf.ok());
  REQUIRE(tool_buf.ok());
  const auto math_dest = Destination::contiguous(math_buf->data(), math_buf->size());
  const auto tool_dest = Destination::contiguous(tool_buf->data(), tool_buf->size());

  // Interleaved, with the same version numbers in both streams and one
  // adapter running ahead: each pull is its own adapter's newest.
  std::uint64_t math_v = 0, tool_v = 0;
  for (int round = 1; round <= 6; ++round) {
    publish_adapter(**math, ++math_v, 1);
    if (round % 2 == 0) publish_adapter(**tool, ++tool_v, 2);
    publish_adapter(**math, ++math_v, 1);
    auto m = (*math_sub)->pull(math_dest);
    REQUIRE(m.ok());
    CHECK(m->version == math_v);
    CHECK(adapter_mismatch(math_layout, math_buf->data(), math_v, 1) == -1);
    if (tool_v > (*tool_sub)->held_version()) {
      auto t = (*tool_sub)->pull(tool_dest);
      REQUIRE(t.ok());
      CHECK(t->version == tool_v);
      CHECK(adapter_mismatch(tool_layout, tool_buf->data(), tool_v, 2) == -1);
    }
    // Nothing newer of its own adapter: the other's publishes do not count.
    auto none = (*tool_sub)->pull(tool_dest);
    REQUIRE_FALSE(none.ok());
    CHECK(none.status().code() == ErrorCode::kNotReady);
  }
  CHECK(*(*math_sub)->latest_version() == 12);
  CHECK(*(*tool_sub)->latest_version() == 3);
}

TEST_CASE("adapters: a version of one adapter never blocks another's", "[adapters]") {
  AdapterPublisherOptions options = adapter_options();
  options.publisher.slots = 2;
  options.publisher.full_ring_policy = FullRingPolicy::kSkip;
  auto made = AdapterPublisher::create(options);
  REQUIRE(made.ok());
  AdapterPublisher& pub = **made;
  auto a = pub.add_adapter("a", bytes_layout(1 << 20));
  auto b = pub.add_adapter("b", bytes_layout(1 << 20));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  publish_adapter(**a, 1, 1);

  // A waits on its own stream while B publishes: B's subscriber gets B's
  // version at once, A's waiter is not woken with it.
  auto a_sub = Subscriber::connect(pub.address(), adapter_subscriber("a", "shm"));
  auto b_sub = Subscriber::connect(pub.address(), adapter_subscriber("b", "shm"));
  REQUIRE(a_sub.ok());
  REQUIRE(b_sub.ok());
  auto a_buf = HostBuffer::allocate(1 << 20);
  auto b_buf = HostBuffer::allocate(1 << 20);
  REQUIRE(a_buf.ok());
  REQUIRE(b_buf.ok());
  REQUIRE((*a_sub)->pull(Destination::contiguous(a_buf->data(), a_buf->size())).ok());

  // A's ring is full: its trainer holds one slot open (uncommitted) and a
  // reader leases the other. B's publishes and pulls go on regardless.
  std::uint64_t a_session = 0;
  Socket a_raw = raw_session(pub.address(), &a_session);
  REQUIRE(raw_select(a_raw, name_payload("a")).ok());
  raw_acquire(a_raw, Deadline::after(std::chrono::seconds(5)));
  auto a_writer = (*a)->begin_publish(2);
  REQUIRE(a_writer.ok());

  std::atomic<bool> a_done{false};
  Result<PullResult> a_pulled = Status(ErrorCode::kInternal, "not run");
  std::thread a_waiter([&] {
    PullOptions wait;
    wait.wait = std::chrono::milliseconds(3000);
    a_pulled = (*a_sub)->pull(Destination::contiguous(a_buf->data(), a_buf->size()), wait);
    a_done = true;
  });
  const auto start = std::chrono::steady_clock::now();
  publish_adapter(**b, 1, 2);
  PullOptions wait;
  wait.wait = std::chrono::milliseconds(2000);
  auto b_pulled = (*b_sub)->pull(Destination::contiguous(b_buf->data(), b_buf->size()), wait);
  REQUIRE(b_pulled.ok());
  CHECK(b_pulled->version == 1);
  CHECK(adapter_mismatch((*b)->layout(), b_buf->data(), 1, 2) == -1);
  CHECK(seconds_since(start) < 1.0);
  CHECK_FALSE(a_done.load());  // still waiting for A's own version 2

  for (const auto& t : (*a)->layout().tensors()) {
    fill_pattern(static_cast<char*>(a_writer->data()) + t.offset, t.bytes, tagged(2, 1), t.offset);
  }
  REQUIRE(a_writer->commit().ok());
  a_waiter.join();
  REQUIRE(a_pulled.ok());
  CHECK(a_pulled->version == 2);
  CHECK(adapter_mismatch((*a)->layout(), a_buf->data(), 2, 1) == -1);
}

TEST_CASE("adapters: an unknown adapter name is refused with the names served, only after authentication",
          "[adapters][attack]") {
  auto made = AdapterPublisher::create(adapter_options());
  REQUIRE(made.ok());
  AdapterPublisher& pub = **made;
  REQUIRE(pub.add_adapter("math-v2", bytes_layout(4096)).ok());
  REQUIRE(pub.add_adapter("tool-use", bytes_layout(4096)).ok());

  auto unknown = Subscriber::connect(pub.address(), adapter_subscriber("chess"));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(unknown.status().message(), Catch::Contains("no adapter named 'chess'"));
  CHECK_THAT(unknown.status().message(), Catch::Contains("math-v2, tool-use"));

  // Without the secret a peer learns nothing: the handshake fails first.
  SubscriberOptions wrong = adapter_subscriber("chess");
  wrong.secret = "not the secret";
  auto stranger = Subscriber::connect(pub.address(), wrong);
  REQUIRE_FALSE(stranger.ok());
  CHECK(stranger.status().code() == ErrorCode::kAuthFailed);
  CHECK_THAT(stranger.status().message(), !Catch::Contains("math-v2"));

  // Naming none on a publisher without a base model: refused, not served garbage.
  auto nameless = Subscriber::connect(pub.address(), adapter_subscriber(""));
  REQUIRE_FALSE(nameless.ok());
  CHECK(nameless.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(nameless.status().message(), Catch::Contains("adapters only"));

  // A plain Publisher serves no adapters: a subscriber naming one is told.
  auto plain = Publisher::create(bytes_layout(4096), PublisherOptions{std::nullopt, 0, kSecret});
  REQUIRE(plain.ok());
  auto old = Subscriber::connect((*plain)->address(), adapter_subscriber("math-v2"));
  REQUIRE_FALSE(old.ok());
  CHECK_THAT(old.status().message(), Catch::Contains("adapter 'math-v2'"));
}

TEST_CASE("adapters: over-long, malformed and many names cost the publisher nothing and it keeps serving",
          "[adapters][attack]") {
  auto made = AdapterPublisher::create(adapter_options());
  REQUIRE(made.ok());
  AdapterPublisher& pub = **made;
  auto math = pub.add_adapter("math-v2", bytes_layout(4096));
  REQUIRE(math.ok());
  publish_adapter(**math, 1, 1);

  // The subscriber refuses a bad name before connecting.
  for (const std::string& bad : {std::string(65, 'a'), std::string("../x"), std::string("a b")}) {
    auto sub = Subscriber::connect(pub.address(), adapter_subscriber(bad));
    REQUIRE_FALSE(sub.ok());
    CHECK(sub.status().code() == ErrorCode::kInvalidArgument);
  }
  // A hostile peer sends them anyway: ERROR(kProtocolError), then closed.
  for (const auto& payload : {name_payload(std::string(65, 'a')), name_payload(std::string(4000, 'a')),
                              name_payload("bad/name"), name_payload(""), std::vector<std::uint8_t>{0xff}}) {
    Socket s = raw_session(pub.address());
    auto answer = raw_select(s, payload);
    REQUIRE_FALSE(answer.ok());
    CHECK(answer.status().code() == ErrorCode::kProtocolError);
  }
  // A second SELECT_STREAM, or one after another request: refused.
  {
    Socket s = raw_session(pub.address());
    REQUIRE(raw_select(s, name_payload("math-v2")).ok());
    auto again = raw_select(s, name_payload("math-v2"));
    REQUIRE_FALSE(again.ok());
    CHECK(again.status().code() == ErrorCode::kProtocolError);
  }
  // Many names: each costs one lookup and a closed connection; nothing is created.
  for (int i = 0; i < 200; ++i) {
    Socket s = raw_session(pub.address());
    auto answer = raw_select(s, name_payload("guess-" + std::to_string(i)));
    REQUIRE_FALSE(answer.ok());
    REQUIRE(answer.status().code() == ErrorCode::kInvalidConfig);
  }
  CHECK(pub.adapter_names() == std::vector<std::string>{"math-v2"});
  auto good = Subscriber::connect(pub.address(), adapter_subscriber("math-v2"));
  REQUIRE(good.ok());
  auto buf = HostBuffer::allocate(4096);
  REQUIRE(buf.ok());
  auto pulled = (*good)->pull(Destination::contiguous(buf->data(), buf->size()));
  REQUIRE(pulled.ok());
  CHECK(adapter_mismatch((*math)->layout(), buf->data(), 1, 1) == -1);
}

TEST_CASE("adapters: a session of adapter A never receives bytes of adapter B, even with B's lease",
          "[adapters][attack]") {
  auto made = AdapterPublisher::create(adapter_options());
  REQUIRE(made.ok());
  AdapterPublisher& pub = **made;
  auto a = pub.add_adapter("a", bytes_layout(8192));
  auto b = pub.add_adapter("b", bytes_layout(8192));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  publish_adapter(**a, 1, 1);
  publish_adapter(**b, 1, 2);
  publish_adapter(**b, 2, 2);

  // B's session leases B's newest version.
  Socket b_control = raw_session(pub.address());
  REQUIRE(raw_select(b_control, name_payload("b")).ok());
  const LeaseMsg b_lease = raw_acquire(b_control, Deadline::after(std::chrono::seconds(5)));
  CHECK(b_lease.version == 2);

  // A's session (control and tcp data connection) presents B's lease id.
  std::uint64_t a_session = 0;
  Socket a_control = raw_session(pub.address(), &a_session);
  REQUIRE(raw_select(a_control, name_payload("a")).ok());
  Socket a_data = raw_connect(pub.address());
  REQUIRE(client_handshake(a_data, kSecret, Role::kData, a_session, "raw-data",
                           Deadline::after(std::chrono::seconds(5)))
              .ok());
  ReadMsg read;
  read.lease_id = b_lease.lease_id;
  read.ranges.push_back(ByteRange{0, 8192});
  send_bytes(a_data, framed(MsgType::kRead, read.encode()));
  auto answer = read_frame(a_data, kMaxReplyPayload, Deadline::after(std::chrono::seconds(5)),
                           Deadline::after(std::chrono::seconds(5)), "publisher");
  if (answer.ok()) CHECK(answer->type != MsgType::kData);  // an ERROR, or closed: never B's bytes

  // A's own lease is A's version 1, whatever B has published.
  const LeaseMsg a_lease = raw_acquire(a_control, Deadline::after(std::chrono::seconds(5)));
  CHECK(a_lease.version == 1);
  auto a_sub = Subscriber::connect(pub.address(), adapter_subscriber("a"));
  REQUIRE(a_sub.ok());
  auto buf = HostBuffer::allocate(8192);
  REQUIRE(buf.ok());
  auto pulled = (*a_sub)->pull(Destination::contiguous(buf->data(), buf->size()));
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 1);
  CHECK(adapter_mismatch((*a)->layout(), buf->data(), 1, 1) == -1);
}

TEST_CASE("adapters: add_adapter bounds the number and size of adapters, and removal is immediate",
          "[adapters]") {
  AdapterPublisherOptions options = adapter_options();
  options.max_adapters = 3;
  options.max_adapter_bytes = 1 << 16;
  CHECK(AdapterPublisher::create(AdapterPublisherOptions{options.publisher, 0}).status().code() ==
        ErrorCode::kInvalidArgument);
  CHECK(AdapterPublisher::create(AdapterPublisherOptions{options.publisher, 5000}).status().code() ==
        ErrorCode::kInvalidArgument);
  auto made = AdapterPublisher::create(options, bytes_layout(4096));
  REQUIRE(made.ok());
  AdapterPublisher& pub = **made;
  REQUIRE(pub.base() != nullptr);
  CHECK(pub.add_adapter("too-big", bytes_layout((1 << 16) + 1)).status().code() ==
        ErrorCode::kInvalidArgument);
  CHECK(pub.add_adapter(std::string(65, 'x'), bytes_layout(16)).status().code() ==
        ErrorCode::kInvalidArgument);
  CHECK(pub.add_adapter("", bytes_layout(16)).status().code() == ErrorCode::kInvalidArgument);
  REQUIRE(pub.add_adapter("one", bytes_layout(16)).ok());
  CHECK(pub.add_adapter("one", bytes_layout(16)).status().code() == ErrorCode::kInvalidArgument);
  REQUIRE(pub.add_adapter("two", bytes_layout(16)).ok());
  REQUIRE(pub.add_adapter("three", bytes_layout(16)).ok());
  CHECK(pub.add_adapter("four", bytes_layout(16)).status().code() == ErrorCode::kBusy);

  // The base model beside them: a subscriber naming no adapter gets it.
  publish_adapter(*pub.base(), 7, 0);
  auto base_sub = Subscriber::connect(pub.address(), adapter_subscriber(""));
  REQUIRE(base_sub.ok());
  CHECK((*base_sub)->layout() == bytes_layout(4096));
  CHECK(*(*base_sub)->latest_version() == 7);

  // Removal: its session is told, new sessions are refused, the slot is free again.
  publish_adapter(*pub.adapter("two"), 1, 2);
  auto two_sub = Subscriber::connect(pub.address(), adapter_subscriber("two"));
  REQUIRE(two_sub.ok());
  REQUIRE(pub.remove_adapter("two").ok());
  CHECK(pub.adapter("two") == nullptr);
  auto buf = HostBuffer::allocate((*two_sub)->layout().total_bytes());
  REQUIRE(buf.ok());
  auto after = (*two_sub)->pull(Destination::contiguous(buf->data(), buf->size()));
  REQUIRE_FALSE(after.ok());
  INFO(after.status().to_string());
  CHECK(after.status().code() == ErrorCode::kConnectionLost);
  CHECK(Subscriber::connect(pub.address(), adapter_subscriber("two")).status().code() ==
        ErrorCode::kInvalidConfig);
  REQUIRE(pub.add_adapter("four", bytes_layout(16)).ok());
  CHECK(pub.remove_adapter("two").code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("adapters: a subscriber waiting for its adapter is answered at the commit, not at the next sweep",
          "[adapters]") {
  auto made = AdapterPublisher::create(adapter_options());
  REQUIRE(made.ok());
  auto a = (*made)->add_adapter("a", bytes_layout(16384));
  REQUIRE(a.ok());
  auto sub = Subscriber::connect((*made)->address(), adapter_subscriber("a", "shm"));
  REQUIRE(sub.ok());
  auto buf = HostBuffer::allocate((*sub)->layout().total_bytes());
  REQUIRE(buf.ok());
  // The event loop looks at parked waits every 50 ms on its own; the
  // adapter's ring wakes it at each commit, so the waits end far sooner.
  std::vector<double> ms;
  for (std::uint64_t v = 1; v <= 15; ++v) {
    std::atomic<bool> committed{false};
    std::chrono::steady_clock::time_point at;
    std::thread trainer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(7));
      at = std::chrono::steady_clock::now();
      publish_adapter(**a, v, 1);
      committed = true;
    });
    PullOptions wait;
    wait.wait = std::chrono::milliseconds(2000);
    auto pulled = (*sub)->pull(Destination::contiguous(buf->data(), buf->size()), wait);
    const auto done = std::chrono::steady_clock::now();
    trainer.join();
    REQUIRE(pulled.ok());
    CHECK(pulled->version == v);
    ms.push_back(std::chrono::duration<double, std::milli>(done - at).count());
  }
  std::sort(ms.begin(), ms.end());
  INFO("median commit-to-pulled " << ms[ms.size() / 2] << " ms");
  CHECK(ms[ms.size() / 2] < 15.0);
}
