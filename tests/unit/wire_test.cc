// Frames and messages: round trips, validation, and random input that must be
// rejected cleanly (a cheap, always-on fuzz of every decoder).
#include <catch2/catch.hpp>

#include <random>

#include "transport/ucx/ucx_offer.h"
#include "transport/verbs/verbs_wire.h"
#include "weightsync/layout.h"
#include "wire/frame.h"
#include "wire/messages.h"
#include "wire/stream_messages.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {

std::vector<std::uint8_t> header_bytes(std::uint32_t magic, std::uint16_t version, std::uint16_t type,
                                       std::uint32_t length, std::uint32_t reserved) {
  std::vector<std::uint8_t> h;
  auto put = [&](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) h.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put(magic, 4);
  put(version, 2);
  put(type, 2);
  put(length, 4);
  put(reserved, 4);
  return h;
}

}  // namespace

TEST_CASE("wire: frame headers are validated before any payload is read", "[wire]") {
  std::uint8_t good[kFrameHeaderBytes];
  encode_header(MsgType::kAcquire, 8, good);
  auto ok = decode_header(good, kMaxRequestPayload);
  REQUIRE(ok.ok());
  CHECK(ok->type == MsgType::kAcquire);
  CHECK(ok->payload_bytes == 8);
  // "WSYN" is how the magic reads on the wire.
  CHECK(std::string(reinterpret_cast<char*>(good), 4) == "WSYN");

  struct Case {
    std::vector<std::uint8_t> bytes;
    const char* message;
  };
  const Case cases[] = {
      {header_bytes(0xdeadbeef, kProtocolVersion, 16, 8, 0), "bad frame magic"},
      {header_bytes(kFrameMagic, 2, 16, 8, 0), "protocol version 2"},
      {header_bytes(kFrameMagic, kProtocolVersion, 999, 8, 0), "unknown frame type"},
      {header_bytes(kFrameMagic, kProtocolVersion, 16, 8, 1), "reserved"},
      {header_bytes(kFrameMagic, kProtocolVersion, 16, 0xffffffffu, 0), "exceeds the limit"},
      {header_bytes(kFrameMagic, kProtocolVersion, 16, kMaxRequestPayload + 1, 0), "exceeds the limit"},
  };
  for (const auto& c : cases) {
    auto r = decode_header(c.bytes.data(), kMaxRequestPayload);
    INFO(c.message);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kProtocolError);
    CHECK_THAT(r.status().message(), Catch::Contains(c.message));
  }
}

TEST_CASE("wire: messages round-trip and reject truncation and trailing bytes", "[wire]") {
  LeaseMsg lease{0x1122334455667788ull, 42, 1, 84, true, 0xabcdef};
  auto bytes = lease.encode();
  auto back = LeaseMsg::decode(bytes);
  REQUIRE(back.ok());
  CHECK(back->lease_id == lease.lease_id);
  CHECK(back->version == 42);
  CHECK(back->slot == 1);
  CHECK(back->checksum == 0xabcdef);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CHECK_FALSE(LeaseMsg::decode(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + n)).ok());
  }
  bytes.push_back(0);
  CHECK_FALSE(LeaseMsg::decode(bytes).ok());
  // A stamp that does not encode the version is refused.
  CHECK_FALSE(LeaseMsg::decode(LeaseMsg{1, 42, 1, 86, false, 0}.encode()).ok());
  CHECK_FALSE(LeaseMsg::decode(LeaseMsg{1, 42, 1, 83, false, 0}.encode()).ok());
  // An odd stamp is a streaming lease of the in-progress version; it never carries a checksum.
  auto streaming = LeaseMsg::decode(LeaseMsg{1, 42, 1, 85, false, 0}.encode());
  REQUIRE(streaming.ok());
  CHECK(streaming->streaming());
  CHECK_FALSE(back->streaming());
  CHECK_FALSE(LeaseMsg::decode(LeaseMsg{1, 42, 1, 85, true, 7}.encode()).ok());
  CHECK_FALSE(LeaseMsg::decode(LeaseMsg{1, 42, 1, 85, false, 7}.encode()).ok());

  ReadMsg read;
  read.lease_id = 9;
  read.ranges = {{0, 10}, {256, 4096}};
  auto rb = ReadMsg::decode(read.encode());
  REQUIRE(rb.ok());
  REQUIRE(rb->ranges.size() == 2);
  CHECK(rb->ranges[1].offset == 256);
  CHECK(rb->ranges[1].length == 4096);
  ReadMsg empty_range;
  empty_range.lease_id = 9;
  empty_range.ranges = {{0, 0}};
  CHECK_FALSE(ReadMsg::decode(empty_range.encode()).ok());
  ReadMsg no_ranges;
  CHECK_FALSE(ReadMsg::decode(no_ranges.encode()).ok());
  ReadMsg too_many;
  too_many.ranges.assign(kMaxReadRanges + 1, ByteRange{0, 1});
  CHECK_FALSE(ReadMsg::decode(too_many.encode()).ok());

  HelloMsg hello;
  hello.role = Role::kData;
  hello.session_id = 77;
  hello.client_name = "gen-3";
  auto hb = HelloMsg::decode(hello.encode());
  REQUIRE(hb.ok());
  CHECK(hb->session_id == 77);
  CHECK(hb->client_name == "gen-3");
  hello.session_id = 0;  // a data connection must name its session
  CHECK_FALSE(HelloMsg::decode(hello.encode()).ok());

  SlotTableMsg table;
  table.slot_count = 3;
  table.slot_bytes = 4096;
  table.checksums = true;
  table.transports = {{"tcp", {}}, {"ucx", {1, 2, 3}}};
  auto tb = SlotTableMsg::decode(table.encode());
  REQUIRE(tb.ok());
  CHECK(tb->transports.size() == 2);
  CHECK(tb->transports[1].blob == std::vector<std::uint8_t>{1, 2, 3});
  table.slot_count = 1;
  CHECK_FALSE(SlotTableMsg::decode(table.encode()).ok());

  ErrorMsg err{ErrorCode::kAuthFailed, "nope"};
  auto eb = ErrorMsg::decode(err.encode());
  REQUIRE(eb.ok());
  CHECK(eb->code == ErrorCode::kAuthFailed);
  auto bad_code = err.encode();
  bad_code[0] = 0;  // kOk is not an error
  CHECK_FALSE(ErrorMsg::decode(bad_code).ok());
  // kCancelled is the caller's own doing: a peer never sends it.
  bad_code[0] = static_cast<std::uint8_t>(ErrorCode::kCancelled);
  CHECK_FALSE(ErrorMsg::decode(bad_code).ok());
}

TEST_CASE("wire: the streaming extension: ACQUIRE and QUERY_VERSION flags, WAIT_WATERMARK, WATERMARK, tcp offer",
          "[wire]") {
  // Without the flag the encodings are exactly the original ones (old peers).
  CHECK(AcquireMsg{7}.encode().size() == 8);
  CHECK(QueryVersionMsg{7, 100}.encode().size() == 12);
  auto acquire = AcquireMsg::decode(AcquireMsg{7, true}.encode());
  REQUIRE(acquire.ok());
  CHECK(acquire->newer_than == 7);
  CHECK(acquire->accept_streaming);
  CHECK_FALSE(AcquireMsg::decode(AcquireMsg{7}.encode())->accept_streaming);
  auto query = QueryVersionMsg::decode(QueryVersionMsg{7, 100, true}.encode());
  REQUIRE(query.ok());
  CHECK(query->newer_than == 7);
  CHECK(query->wait_ms == 100);
  CHECK(query->accept_streaming);
  // The flag is present only when set, must be 1, and nothing may follow it.
  for (auto bytes : {AcquireMsg{7}.encode(), QueryVersionMsg{7, 100}.encode()}) {
    const bool is_acquire = bytes.size() == 8;
    auto decode_ok = [&](const std::vector<std::uint8_t>& b) {
      return is_acquire ? AcquireMsg::decode(b).ok() : QueryVersionMsg::decode(b).ok();
    };
    for (std::uint8_t flag : {0, 2, 255}) {
      auto with = bytes;
      with.push_back(flag);
      CHECK_FALSE(decode_ok(with));
    }
    auto two = bytes;
    two.push_back(1);
    two.push_back(1);
    CHECK_FALSE(decode_ok(two));
    bytes.pop_back();
    CHECK_FALSE(decode_ok(bytes));
  }

  auto wait = WaitWatermarkMsg::decode(WaitWatermarkMsg{0x1122, 4096, 250}.encode());
  REQUIRE(wait.ok());
  CHECK(wait->lease_id == 0x1122);
  CHECK(wait->bytes == 4096);
  CHECK(wait->wait_ms == 250);
  auto wait_bytes = WaitWatermarkMsg{1, WaitWatermarkMsg::kWaitForCommit, 10}.encode();
  CHECK(wait_bytes.size() == 20);
  CHECK(WaitWatermarkMsg::decode(wait_bytes)->bytes == UINT64_MAX);
  for (std::size_t n = 0; n < wait_bytes.size(); ++n) {
    CHECK_FALSE(WaitWatermarkMsg::decode(std::vector<std::uint8_t>(wait_bytes.begin(), wait_bytes.begin() + n)).ok());
  }
  wait_bytes.push_back(0);
  CHECK_FALSE(WaitWatermarkMsg::decode(wait_bytes).ok());

  auto mark = WatermarkMsg::decode(WatermarkMsg{1 << 20, true, true, 0xabc}.encode());
  REQUIRE(mark.ok());
  CHECK(mark->watermark == (1u << 20));
  CHECK(mark->committed);
  CHECK(mark->has_checksum);
  CHECK(mark->checksum == 0xabc);
  auto in_progress = WatermarkMsg::decode(WatermarkMsg{4096, false, false, 0}.encode());
  REQUIRE(in_progress.ok());
  CHECK_FALSE(in_progress->committed);
  auto mark_bytes = WatermarkMsg{4096, false, false, 0}.encode();
  CHECK(mark_bytes.size() == 18);
  for (std::size_t n = 0; n < mark_bytes.size(); ++n) {
    CHECK_FALSE(WatermarkMsg::decode(std::vector<std::uint8_t>(mark_bytes.begin(), mark_bytes.begin() + n)).ok());
  }
  mark_bytes.push_back(0);
  CHECK_FALSE(WatermarkMsg::decode(mark_bytes).ok());
  // A checksum only with a committed version; flags are 0 or 1.
  CHECK_FALSE(WatermarkMsg::decode(WatermarkMsg{4096, false, true, 5}.encode()).ok());
  CHECK_FALSE(WatermarkMsg::decode(WatermarkMsg{4096, true, false, 5}.encode()).ok());
  auto bad_flag = WatermarkMsg{4096, true, false, 0}.encode();
  bad_flag[8] = 2;
  CHECK_FALSE(WatermarkMsg::decode(bad_flag).ok());

  // The tcp offer: empty (older publishers) means no features.
  auto none = TcpOffer::decode({});
  REQUIRE(none.ok());
  CHECK(none->features == 0);
  CHECK(TcpOffer{}.encode().empty());
  auto offer = TcpOffer::decode(TcpOffer{kTcpFeatureStreaming}.encode());
  REQUIRE(offer.ok());
  CHECK(offer->features == kTcpFeatureStreaming);
  auto offer_bytes = TcpOffer{kTcpFeatureStreaming | 0x80}.encode();
  CHECK(TcpOffer::decode(offer_bytes)->features == (kTcpFeatureStreaming | 0x80));  // unknown bits ignored by users
  offer_bytes[0] = 2;  // another version
  CHECK_FALSE(TcpOffer::decode(offer_bytes).ok());
  CHECK_FALSE(TcpOffer::decode({1, 0, 1}).ok());  // truncated
}

TEST_CASE("wire: views: REGISTER_VIEW, VIEW and ACQUIRE_VIEW round-trip and refuse bad payloads", "[wire]") {
  RegisterViewMsg view{5, {{0, 64, 4, 256}, {4096, 8, 1, 0}}};
  auto bytes = view.encode();
  CHECK(bytes.size() == 8 + 2 * 32);
  auto decoded = RegisterViewMsg::decode(bytes);
  REQUIRE(decoded.ok());
  CHECK(decoded->view_id == 5);
  REQUIRE(decoded->entries.size() == 2);
  CHECK(decoded->entries[0].offset == 0);
  CHECK(decoded->entries[0].length == 64);
  CHECK(decoded->entries[0].count == 4);
  CHECK(decoded->entries[0].stride == 256);
  CHECK(decoded->entries[1].offset == 4096);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CHECK_FALSE(RegisterViewMsg::decode(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + n)).ok());
  }
  auto trailing = bytes;
  trailing.push_back(0);
  CHECK_FALSE(RegisterViewMsg::decode(trailing).ok());
  CHECK_FALSE(RegisterViewMsg::decode(RegisterViewMsg{0, {}}.encode()).ok());            // no entries
  CHECK_FALSE(RegisterViewMsg::decode(RegisterViewMsg{0, {{0, 0, 1, 0}}}.encode()).ok());  // empty range
  CHECK_FALSE(RegisterViewMsg::decode(RegisterViewMsg{0, {{0, 8, 0, 0}}}.encode()).ok());  // no ranges
  RegisterViewMsg too_many;
  too_many.entries.assign(kMaxViewEntriesPerMessage + 1, ViewEntry{0, 1, 1, 0});
  CHECK_FALSE(RegisterViewMsg::decode(too_many.encode()).ok());
  too_many.entries.pop_back();
  CHECK(RegisterViewMsg::decode(too_many.encode()).ok());
  CHECK(too_many.encode().size() + kFrameHeaderBytes <= kMaxRequestPayload);  // one part fits a request

  auto v = ViewMsg::decode(ViewMsg{7, 4001}.encode());
  REQUIRE(v.ok());
  CHECK(v->view_id == 7);
  CHECK(v->entries == 4001);
  CHECK_FALSE(ViewMsg::decode(ViewMsg{0, 1}.encode()).ok());  // id 0 is "new", never an answer

  auto a = AcquireViewMsg::decode(AcquireViewMsg{9, true, 3}.encode());
  REQUIRE(a.ok());
  CHECK(a->version == 9);
  CHECK(a->exact);
  CHECK(a->view_id == 3);
  auto a_bytes = AcquireViewMsg{9, false, 0}.encode();
  CHECK(a_bytes.size() == 13);
  CHECK_FALSE(AcquireViewMsg::decode(AcquireViewMsg{0, true, 0}.encode()).ok());  // exact version 0
  a_bytes[8] = 2;                                                                   // a flag is 0 or 1
  CHECK_FALSE(AcquireViewMsg::decode(a_bytes).ok());
  a_bytes[8] = 0;
  a_bytes.push_back(0);
  CHECK_FALSE(AcquireViewMsg::decode(a_bytes).ok());
}

TEST_CASE("wire: random and mutated bytes never crash or fool the decoders", "[wire][fuzz]") {
  std::mt19937_64 rng(20261122);
  auto layout = WeightLayout::build({{"a", DType::kFloat32, {16}}, {"b", DType::kInt8, {3, 3}}});
  REQUIRE(layout.ok());
  ReadMsg read;
  read.lease_id = 5;
  read.ranges = {{0, 64}, {256, 9}};
  HelloMsg hello;
  hello.client_name = "fuzz";
  SlotTableMsg table;
  table.slot_count = 2;
  table.slot_bytes = 512;
  table.transports = {{"tcp", {}}};
  UcxOffer ucx;
  ucx.worker_address = {1, 2, 3};
  ucx.slots = {{4096, 1 << 20, {7, 7}}, {8192, 1 << 20, {8}}};
  ucx.stamps = {65536, 4096, {9}};
  const std::vector<std::vector<std::uint8_t>> seeds = {
      layout->serialize(),
      read.encode(),
      hello.encode(),
      table.encode(),
      LeaseMsg{1, 2, 0, 4, true, 9}.encode(),
      ErrorMsg{ErrorCode::kBusy, "x"}.encode(),
      ShmRegionsMsg{3, 4096, 4096}.encode(),
      CudaIpcRegionsMsg{2, 4096, 4096, {{}, {}}}.encode(),
      ShmOffer{"boot", "weightsync-abc"}.encode(),
      ucx.encode(),
      VerbsOffer{{{4096, 65536, 7}, {8192, 65536, 8}}, {12288, 4096, 9}}.encode(),
      VerbsEndpoint{0x1234, 0x42, 3, {}, 5}.encode(),
      TransportConnectMsg{"verbs", {1, 2, 3}}.encode(),
      AcquireMsg{3, true}.encode(),
      QueryVersionMsg{3, 10, true}.encode(),
      LeaseMsg{1, 2, 0, 5, false, 0}.encode(),
      WaitWatermarkMsg{1, 4096, 10}.encode(),
      WatermarkMsg{4096, true, true, 3}.encode(),
      TcpOffer{kTcpFeatureStreaming}.encode(),
      RegisterViewMsg{0, {{0, 64, 4, 256}, {4096, 8, 1, 0}}}.encode(),
      ViewMsg{3, 2}.encode(),
      AcquireViewMsg{9, true, 3}.encode(),
      SelectStreamMsg{"math-v2"}.encode()};
  std::uint64_t executions = 0, accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<std::uint8_t> input;
    if (i % 2 == 0) {
      input.resize(rng() % 96);
      for (auto& b : input) b = static_cast<std::uint8_t>(rng());
    } else {
      input = seeds[rng() % seeds.size()];
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips && !input.empty(); ++f)
        input[rng() % input.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
      if (rng() % 4 == 0 && !input.empty()) input.resize(rng() % input.size());
    }
    accepted += HelloMsg::decode(input).ok();
    accepted += ReadMsg::decode(input).ok();
    accepted += LeaseMsg::decode(input).ok();
    accepted += SlotTableMsg::decode(input).ok();
    accepted += ErrorMsg::decode(input).ok();
    accepted += QueryVersionMsg::decode(input).ok();
    if (auto a = AcquireMsg::decode(input); a.ok()) {
      ++accepted;
      CHECK(input.size() == (a->accept_streaming ? 9u : 8u));
    }
    if (auto l = LeaseMsg::decode(input); l.ok()) {
      CHECK((l->stamp >> 1) == l->version);
      CHECK((!l->streaming() || !l->has_checksum));
    }
    if (auto n = SelectStreamMsg::decode(input); n.ok()) {
      ++accepted;
      CHECK(valid_stream_name(n->name));
      CHECK(input.size() == 2 + n->name.size());
    }
    accepted += WaitWatermarkMsg::decode(input).ok();
    if (auto w = WatermarkMsg::decode(input); w.ok()) {
      ++accepted;
      CHECK((w->committed || !w->has_checksum));
    }
    accepted += TcpOffer::decode(input).ok();
    if (auto v = RegisterViewMsg::decode(input); v.ok()) {
      ++accepted;
      CHECK_FALSE(v->entries.empty());
      CHECK(v->entries.size() <= kMaxViewEntriesPerMessage);
      for (const auto& e : v->entries) CHECK((e.length > 0 && e.count > 0));
    }
    if (auto v = ViewMsg::decode(input); v.ok()) {
      ++accepted;
      CHECK(v->view_id != 0);
    }
    if (auto a = AcquireViewMsg::decode(input); a.ok()) {
      ++accepted;
      CHECK((!a->exact || a->version != 0));
    }
    if (auto r = ShmRegionsMsg::decode(input); r.ok()) {
      ++accepted;
      CHECK(r->stamp_bytes >= r->slot_count * 8);
    }
    if (auto r = CudaIpcRegionsMsg::decode(input); r.ok()) {
      ++accepted;
      CHECK(r->handles.size() == r->slot_count);
      CHECK(r->stamp_bytes >= r->slot_count * 8);
    }
    accepted += ShmOffer::decode(input).ok();
    accepted += VerbsOffer::decode(input).ok();
    if (auto t = TransportConnectMsg::decode(input); t.ok()) {
      ++accepted;
      CHECK_FALSE(t->transport.empty());
    }
    if (auto e = VerbsEndpoint::decode(input); e.ok()) {
      ++accepted;
      CHECK(e->qp_num != 0);
      CHECK((e->psn >> 24) == 0);
    }
    if (auto o = UcxOffer::decode(input); o.ok()) {
      ++accepted;
      CHECK(o->slots.size() >= 2);
      for (const auto& s : o->slots) CHECK_FALSE(s.rkey.empty());
    }
    if (auto l = WeightLayout::deserialize(input.data(), input.size()); l.ok()) {
      ++accepted;
      // Anything accepted obeys the layout rules.
      for (const auto& t : l->tensors()) {
        CHECK(t.offset % l->alignment() == 0);
        CHECK(t.offset + t.bytes <= l->total_bytes());
      }
    }
    if (input.size() >= kFrameHeaderBytes) {
      auto h = decode_header(input.data(), kMaxRequestPayload);
      if (h.ok()) CHECK(h->payload_bytes <= kMaxRequestPayload);
    }
    ++executions;
  }
  WARN("wire fuzz: " << executions << " inputs, " << accepted << " decoder acceptances, 0 crashes");
  CHECK(executions == 200000);
}

TEST_CASE("CUDA_IPC_REGIONS round-trips its handles and refuses short or inconsistent payloads", "[wire]") {
  CudaIpcRegionsMsg msg;
  msg.slot_count = 3;
  msg.slot_bytes = 1 << 20;
  msg.stamp_bytes = 4096;
  for (std::uint8_t i = 0; i < 3; ++i) {
    std::array<std::uint8_t, CudaIpcRegionsMsg::kHandleBytes> h{};
    for (std::size_t b = 0; b < h.size(); ++b) h[b] = static_cast<std::uint8_t>(i * 64 + b);
    msg.handles.push_back(h);
  }
  const auto bytes = msg.encode();
  auto back = CudaIpcRegionsMsg::decode(bytes);
  REQUIRE(back.ok());
  CHECK(back->slot_count == 3);
  CHECK(back->slot_bytes == (1u << 20));
  CHECK(back->handles == msg.handles);
  auto short_payload = bytes;
  short_payload.pop_back();  // one handle byte missing
  CHECK(CudaIpcRegionsMsg::decode(short_payload).status().code() == ErrorCode::kProtocolError);
  auto trailing = bytes;
  trailing.push_back(0);
  CHECK(CudaIpcRegionsMsg::decode(trailing).status().code() == ErrorCode::kProtocolError);
  CudaIpcRegionsMsg tiny_stamps = msg;
  tiny_stamps.stamp_bytes = 8;  // fewer than one stamp per slot
  CHECK_FALSE(CudaIpcRegionsMsg::decode(tiny_stamps.encode()).ok());
}

TEST_CASE("wire: VERSION and DELTA refuse a version beyond 2^63-1 (issue 30, finding 9)", "[wire]") {
  CHECK(VersionMsg::decode(VersionMsg{0}.encode()).ok());
  CHECK(VersionMsg::decode(VersionMsg{kMaxVersion}.encode()).ok());
  CHECK(VersionMsg::decode(VersionMsg{kMaxVersion + 1}.encode()).status().code() == ErrorCode::kProtocolError);
  CHECK_FALSE(VersionMsg::decode(VersionMsg{UINT64_MAX}.encode()).ok());
  DeltaMsg chain;
  chain.element_bytes = 2;
  chain.links.push_back(DeltaLinkHeader{1, kMaxVersion, 7, 10});
  CHECK(DeltaMsg::decode(chain.encode()).ok());
  chain.links.back().to = kMaxVersion + 1;
  CHECK_FALSE(DeltaMsg::decode(chain.encode()).ok());
}
