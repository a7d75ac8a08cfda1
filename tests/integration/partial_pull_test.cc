// Partial pulls (Destination::slices), their views and checksums, exact
// versions, prepared plans and the registration lifecycle, over the real tcp
// transport; plus what a hostile authenticated peer can do with views.
// The same guarantees on every transport: conformance "partial".
#include <catch2/catch.hpp>

#include <cstring>
#include <thread>

#include "auth/handshake.h"
#include "peers.h"
#include "publisher/view_registry.h"
#include "raw_peer.h"
#include "tcp_proxy.h"

using namespace weightsync;
using namespace wstest;

namespace {

// A layout of byte tensors shaped like matrices: a [64 x 256], b [1000], c [128 x 96].
WeightLayout matrix_layout() {
  auto layout = WeightLayout::build({{"a", DType::kUInt8, {64, 256}},
                                     {"b", DType::kUInt8, {1000}},
                                     {"c", DType::kUInt8, {128, 96}}});
  REQUIRE(layout.ok());
  return *layout;
}

// Offset of the first wrong byte the slices delivered for `version`, or -1.
std::int64_t slices_mismatch(const WeightLayout& layout, const std::vector<TensorSlice>& slices,
                             std::uint64_t version) {
  for (const auto& s : slices) {
    const TensorEntry* t = layout.find(s.tensor);
    REQUIRE(t != nullptr);
    const std::uint64_t dest_stride = s.dest_stride == 0 ? s.length : s.dest_stride;
    for (std::uint64_t i = 0; i < s.count; ++i) {
      const std::uint64_t at = t->offset + s.offset + i * s.stride;
      auto bad = find_mismatch(static_cast<const char*>(s.dest) + i * dest_stride, s.length, version, at);
      if (bad >= 0) return static_cast<std::int64_t>(at) + bad;
    }
  }
  return -1;
}

// Slices of every kind: rows 8..23 of a (a dim-0 slice), columns 64..127 of
// a and of c (strided) landing side by side in one fused buffer, and all of b.
struct SliceSet {
  std::vector<char> rows = std::vector<char>(16 * 256);
  std::vector<char> fused = std::vector<char>(64 * 64 + 128 * 32);
  std::vector<char> b = std::vector<char>(1000);
  std::vector<TensorSlice> slices;
  SliceSet() {
    slices.push_back(TensorSlice{"a", 8 * 256, 16 * 256, 1, 0, rows.data(), 0});
    slices.push_back(TensorSlice{"a", 64, 64, 64, 256, fused.data(), 64});
    slices.push_back(TensorSlice{"c", 32, 32, 128, 96, fused.data() + 64 * 64, 32});
    slices.push_back(TensorSlice{"b", 0, 1000, 1, 0, b.data(), 0});
  }
  std::uint64_t bytes() const { return rows.size() + fused.size() + b.size(); }
};

std::unique_ptr<Publisher> make_publisher(const WeightLayout& layout, bool checksums, std::size_t slots = 3) {
  PublisherOptions options;
  options.checksum = checksums;
  options.slots = slots;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  return std::move(*publisher);
}

}  // namespace

TEST_CASE("partial pulls: dim-0, strided and subset slices arrive bit-exact and verified, one view per plan",
          "[partial]") {
  const auto layout = matrix_layout();
  auto publisher = make_publisher(layout, /*checksums=*/true);
  auto sub = Subscriber::connect(publisher->address(), quick_options());
  REQUIRE(sub.ok());
  SliceSet set;
  const auto destination = Destination::slices(set.slices);
  for (std::uint64_t version = 1; version <= 4; ++version) {
    publish_pattern(*publisher, version);
    auto pulled = (*sub)->pull(destination);
    INFO(pulled.status().to_string());
    REQUIRE(pulled.ok());
    CHECK(pulled->version == version);
    CHECK(pulled->partial);
    CHECK(pulled->bytes == set.bytes());
    CHECK(pulled->checksum_verified);
    CHECK(pulled->checksum != 0);
    CHECK(slices_mismatch(layout, set.slices, version) == -1);
  }
  // The same ranges pulled four times: registered with the publisher once.
  CHECK((*sub)->stats().views == 1);
  // A prepared plan replays the same view; a different destination is another view.
  auto plan = (*sub)->prepare(destination);
  REQUIRE(plan.ok());
  CHECK(plan->partial());
  CHECK(plan->bytes() == set.bytes());
  CHECK(plan->pieces() == 1 + 64 + 128 + 1);  // the strided slices read row by row, the others whole
  publish_pattern(*publisher, 5);
  auto replayed = (*sub)->pull(*plan);
  REQUIRE(replayed.ok());
  CHECK(replayed->checksum_verified);
  CHECK(slices_mismatch(layout, set.slices, 5) == -1);
  CHECK((*sub)->stats().views == 1);
  std::vector<char> only_b(1000);
  publish_pattern(*publisher, 6);
  auto other = (*sub)->pull(Destination::slices({TensorSlice{"b", 0, 1000, 1, 0, only_b.data(), 0}}));
  REQUIRE(other.ok());
  CHECK(find_mismatch(only_b.data(), 1000, 6, layout.find("b")->offset) == -1);
  CHECK((*sub)->stats().views == 2);
  // Without checksums a partial pull registers no view and verifies nothing.
  auto plain_publisher = make_publisher(layout, /*checksums=*/false);
  publish_pattern(*plain_publisher, 1);
  auto plain = Subscriber::connect(plain_publisher->address(), quick_options());
  REQUIRE(plain.ok());
  auto unverified = (*plain)->pull(destination);
  REQUIRE(unverified.ok());
  CHECK_FALSE(unverified->checksum_verified);
  CHECK(slices_mismatch(layout, set.slices, 1) == -1);
  CHECK((*plain)->stats().views == 0);
}

TEST_CASE("partial pulls: a byte flipped in transit fails the view checksum and is retried, never delivered",
          "[partial]") {
  const auto layout = matrix_layout();
  auto publisher = make_publisher(layout, /*checksums=*/true);
  publish_pattern(*publisher, 1);
  // Connection 2 is the data connection; byte 1000 of its stream lies in the
  // first slice's bytes (after a small DATA header).
  FaultyProxy proxy(publisher->port(), 2, 1000);
  auto options = quick_options();
  options.max_retries = 0;
  auto sub = Subscriber::connect(proxy.address(), options);
  REQUIRE(sub.ok());
  SliceSet set;
  auto failed = (*sub)->pull(Destination::slices(set.slices));
  REQUIRE_FALSE(failed.ok());
  CHECK(proxy.flips() == 1);
  CHECK(failed.status().code() == ErrorCode::kChecksumMismatch);
  CHECK((*sub)->status().ok());
  auto next = (*sub)->pull(Destination::slices(set.slices));
  REQUIRE(next.ok());
  CHECK(next->checksum_verified);
  CHECK(slices_mismatch(layout, set.slices, 1) == -1);
}

TEST_CASE("partial pulls: slices that do not fit the layout are refused and the connection stays", "[partial]") {
  const auto layout = matrix_layout();
  auto publisher = make_publisher(layout, /*checksums=*/true);
  publish_pattern(*publisher, 1);
  auto sub = Subscriber::connect(publisher->address(), quick_options());
  REQUIRE(sub.ok());
  std::vector<char> buf(1 << 16);
  const std::vector<std::pair<TensorSlice, std::string>> bad = {
      {TensorSlice{"nope", 0, 1, 1, 0, buf.data(), 0}, "unknown tensor"},
      {TensorSlice{"b", 900, 101, 1, 0, buf.data(), 0}, "reaches past"},
      {TensorSlice{"a", 0, 64, 65, 256, buf.data(), 0}, "reaches past"},
      {TensorSlice{"a", 0, 64, 4, 32, buf.data(), 0}, "overlap"},
      {TensorSlice{"a", 0, 64, 4, 256, buf.data(), 16}, "dest_stride"},
      {TensorSlice{"b", 0, 0, 1, 0, buf.data(), 0}, "no length"},
      {TensorSlice{"b", 0, 10, 1, 0, nullptr, 0}, "no destination"},
      {TensorSlice{"b", ~0ull - 4, 10, 1, 0, buf.data(), 0}, "reaches past"},
      {TensorSlice{"a", 0, 8, ~0ull, 8, buf.data(), 0}, "reaches past"},
  };
  for (const auto& [slice, why] : bad) {
    INFO(why);
    auto pulled = (*sub)->pull(Destination::slices({slice}));
    REQUIRE_FALSE(pulled.ok());
    CHECK(pulled.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(pulled.status().message(), Catch::Contains(why));
  }
  auto empty = (*sub)->pull(Destination::slices({}));
  CHECK(empty.status().code() == ErrorCode::kInvalidArgument);
  CHECK((*sub)->status().ok());
  CHECK((*sub)->stats().views == 0);
}

TEST_CASE("exact versions: delivered, waited for, or refused as gone without retries", "[partial][exact]") {
  const auto layout = matrix_layout();
  auto publisher = make_publisher(layout, /*checksums=*/true, /*slots=*/3);
  auto sub = Subscriber::connect(publisher->address(), quick_options());
  REQUIRE(sub.ok());
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  const auto whole = Destination::contiguous(image->data(), image->size());
  for (std::uint64_t v = 1; v <= 3; ++v) publish_pattern(*publisher, v);
  PullOptions two;
  two.version = 2;
  auto pulled = (*sub)->pull(whole, two);
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 2);  // not the newest (3): exactly the one asked for
  CHECK(pulled->checksum_verified);
  CHECK(image_mismatch(layout, image->data(), 2) == -1);
  // Not yet published: kNotReady at once, or waited for.
  PullOptions five;
  five.version = 5;
  auto early = (*sub)->pull(whole, five);
  CHECK(early.status().code() == ErrorCode::kNotReady);
  five.wait = std::chrono::seconds(5);
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    publish_pattern(*publisher, 4);
    publish_pattern(*publisher, 5);
  });
  auto waited = (*sub)->pull(whole, five);
  later.join();
  REQUIRE(waited.ok());
  CHECK(waited->version == 5);
  CHECK(waited->wait_seconds > 0.05);
  CHECK(image_mismatch(layout, image->data(), 5) == -1);
  // Version 2's slot was reused by 5: gone, refused at once, not retried.
  auto gone = (*sub)->pull(whole, two);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.status().code() == ErrorCode::kVersionRevoked);
  CHECK_THAT(gone.status().message(), Catch::Contains("no longer held"));
  CHECK((*sub)->status().ok());
  // Exact partial pulls combine both.
  SliceSet set;
  PullOptions four;
  four.version = 4;
  auto partial = (*sub)->pull(Destination::slices(set.slices), four);
  REQUIRE(partial.ok());
  CHECK(partial->version == 4);
  CHECK(partial->checksum_verified);
  CHECK(slices_mismatch(layout, set.slices, 4) == -1);
  PullOptions zero;
  zero.version = 0;
  CHECK((*sub)->pull(whole, zero).status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("registration lifecycle: register a region once, release it, pulls register again",
          "[partial][registrations]") {
  // Over tcp nothing is registered: the calls succeed and count nothing.
  // (The UCX get path, which registers, runs the same in conformance "partial".)
  const auto layout = matrix_layout();
  auto publisher = make_publisher(layout, /*checksums=*/false);
  publish_pattern(*publisher, 1);
  auto sub = Subscriber::connect(publisher->address(), quick_options());
  REQUIRE(sub.ok());
  std::vector<char> arena(1 << 16);
  CHECK((*sub)->register_memory(arena.data(), arena.size()).ok());
  CHECK((*sub)->release_memory(arena.data(), arena.size()).ok());
  CHECK((*sub)->register_memory(nullptr, 10).code() == ErrorCode::kInvalidArgument);
  CHECK((*sub)->release_memory(arena.data(), 0).code() == ErrorCode::kInvalidArgument);
  CHECK((*sub)->stats().registrations == 0);
  CHECK((*sub)->stats().registrations_released == 0);
}

TEST_CASE("partial pulls: a prepared plan belongs to its subscriber", "[partial]") {
  const auto layout = matrix_layout();
  auto publisher = make_publisher(layout, /*checksums=*/true);
  publish_pattern(*publisher, 1);
  auto first = Subscriber::connect(publisher->address(), quick_options());
  auto second = Subscriber::connect(publisher->address(), quick_options());
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  SliceSet set;
  auto plan = (*first)->prepare(Destination::slices(set.slices));
  REQUIRE(plan.ok());
  auto foreign = (*second)->pull(*plan);
  CHECK(foreign.status().code() == ErrorCode::kInvalidArgument);
  CHECK((*second)->pull(PullPlan{}).status().code() == ErrorCode::kInvalidArgument);
  CHECK((*first)->pull(*plan).ok());
}

TEST_CASE("hostile peers: views outside the slot, over its size, or past the caps are refused and the session stays",
          "[partial][hostile]") {
  using namespace weightsync::detail;
  const auto layout = matrix_layout();
  auto publisher = make_publisher(layout, /*checksums=*/true);
  publish_pattern(*publisher, 1);
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  auto control = raw_connect(publisher->address());
  REQUIRE(client_handshake(control, "", Role::kControl, 0, "evil", deadline).ok());
  const std::uint64_t slot = layout.total_bytes();
  auto register_view = [&](RegisterViewMsg msg) -> Result<Frame> {
    REQUIRE(write_frame(control, MsgType::kRegisterView, msg.encode(), deadline, "p").ok());
    return read_expected(control, MsgType::kView, kMaxReplyPayload, deadline, "p");
  };
  const std::vector<ViewEntry> bad = {
      {slot - 10, 11, 1, 0},         // past the end
      {~0ull - 4, 10, 1, 0},         // overflowing offset
      {0, 64, ~0ull, 64},            // overflowing count x stride
      {0, 64, 4, 32},                // overlapping ranges
      {0, slot, 1, 0},               // fine alone ...
  };
  for (std::size_t i = 0; i + 1 < bad.size(); ++i) {
    INFO("entry " << i);
    auto refused = register_view(RegisterViewMsg{0, {bad[i]}});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
  }
  // ... but naming the slot twice covers more bytes than it holds.
  auto twice = register_view(RegisterViewMsg{0, {bad.back(), bad.back()}});
  CHECK(twice.status().code() == ErrorCode::kInvalidArgument);
  // Someone else's (or no) view.
  auto foreign = register_view(RegisterViewMsg{77, {{0, 8, 1, 0}}});
  CHECK(foreign.status().code() == ErrorCode::kInvalidArgument);
  REQUIRE(write_frame(control, MsgType::kAcquireView, AcquireViewMsg{0, false, 77}.encode(), deadline, "p").ok());
  auto no_view = read_expected(control, MsgType::kLease, kMaxReplyPayload, deadline, "p");
  CHECK(no_view.status().code() == ErrorCode::kInvalidArgument);
  // At most kMaxViewsPerSession views per session.
  for (std::size_t i = 0; i < ViewRegistry::kMaxViewsPerSession; ++i) {
    REQUIRE(register_view(RegisterViewMsg{0, {{i, 1, 1, 0}}}).ok());
  }
  auto capped = register_view(RegisterViewMsg{0, {{0, 1, 1, 0}}});
  CHECK(capped.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(capped.status().message(), Catch::Contains("views"));
  // The session still works: a lease of the newest version.
  const LeaseMsg lease = raw_acquire(control, deadline);
  CHECK(lease.version == 1);
  CHECK(publisher->stats().protocol_errors == 0);
  // A malformed REGISTER_VIEW (zero entries) is a protocol error: closed.
  RegisterViewMsg empty;
  auto bytes = empty.encode();
  REQUIRE(write_frame(control, MsgType::kRegisterView, bytes, deadline, "p").ok());
  auto closed = read_expected(control, MsgType::kView, kMaxReplyPayload, deadline, "p");
  CHECK(closed.status().code() == ErrorCode::kProtocolError);
}
