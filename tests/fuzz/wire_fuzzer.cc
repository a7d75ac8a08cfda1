// libFuzzer harness for everything that parses bytes from the network: frame
// headers, every control message, the layout encoding, the encryption
// layer's records, delta chains and signature blocks. Whatever a decoder
// accepts must obey its documented bounds. Build and run: scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include "auth/server_handshake.h"
#include "auth/signing.h"
#include "net/record_layer.h"
#include "transport/ucx/ucx_offer.h"
#include "transport/verbs/verbs_wire.h"
#include "weightsync/layout.h"
#include "wire/frame.h"
#include "wire/frame_assembler.h"
#include "wire/messages.h"
#include "wire/stream_messages.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {
void require(bool condition) {
  if (!condition) std::abort();  // a broken invariant is a finding
}

// The publisher's event loop: bytes from an unauthenticated peer are framed
// by FrameAssembler under the pre-authentication bound, then fed to the
// handshake state machine, which must refuse anything but HELLO then AUTH.
void fuzz_handshake(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  Socket reader(fds[0]);
  (void)!::write(fds[1], data, size);
  ::close(fds[1]);
  FrameAssembler in;
  HandshakeResponder responder("fuzz-secret");
  for (int frames = 0; frames < 4; ++frames) {
    auto progress = in.read_from(reader, kMaxHandshakePayload, "fuzz");
    if (!progress.ok() || *progress != FrameAssembler::Progress::kFrame) return;
    Frame frame = in.take_frame();
    require(frame.payload.size() <= kMaxHandshakePayload);
    if (!responder.hello_received()) {
      if (!responder.on_hello(frame).ok()) return;
      require(frame.type == MsgType::kHello);
    } else {
      // A forged AUTH never passes: the MAC covers a nonce the peer never saw.
      require(!responder.on_auth(frame).ok());
      return;
    }
  }
}

// An encrypted connection after WELCOME: whatever arrives goes through the
// record layer first. Bytes made without the key never authenticate, so
// nothing may come out of it, and the reads stay within their buffers.
void fuzz_records(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  Socket reader(fds[0]);
  (void)!::write(fds[1], data, size);
  ::close(fds[1]);
  auto records = RecordLayer::create(RecordKey{}, RecordKey{});
  if (!records.ok()) return;
  reader.enable_records(std::move(*records));
  FrameAssembler in;
  auto progress = in.read_from(reader, kMaxRequestPayload, "fuzz");
  require(!progress.ok() || *progress == FrameAssembler::Progress::kNeedMore);
  require(reader.records()->records_received() == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz_handshake(data, size);
  fuzz_records(data, size);
  if (size >= kFrameHeaderBytes) {
    auto header = decode_header(data, kMaxRequestPayload);
    if (header.ok()) require(header->payload_bytes <= kMaxRequestPayload);
  }
  const std::vector<std::uint8_t> payload(data, data + size);
  (void)HelloMsg::decode(payload);
  (void)ChallengeMsg::decode(payload);
  (void)AuthMsg::decode(payload);
  (void)WelcomeMsg::decode(payload);
  (void)ErrorMsg::decode(payload);
  (void)LayoutMsg::decode(payload);
  (void)QueryVersionMsg::decode(payload);
  (void)VersionMsg::decode(payload);
  if (auto a = AcquireMsg::decode(payload); a.ok()) require(payload.size() == (a->accept_streaming ? 9u : 8u));
  (void)WaitWatermarkMsg::decode(payload);
  if (auto w = WatermarkMsg::decode(payload); w.ok()) require(w->committed || (!w->has_checksum && w->checksum == 0));
  (void)TcpOffer::decode(payload);
  if (auto v = RegisterViewMsg::decode(payload); v.ok()) {
    require(!v->entries.empty() && v->entries.size() <= kMaxViewEntriesPerMessage);
    for (const auto& e : v->entries) require(e.length > 0 && e.count > 0);
  }
  if (auto v = ViewMsg::decode(payload); v.ok()) require(v->view_id != 0);
  if (auto a = AcquireViewMsg::decode(payload); a.ok()) require(!a->exact || a->version != 0);
  (void)ReleaseMsg::decode(payload);
  (void)DataMsg::decode(payload);
  (void)DataEndMsg::decode(payload);
  if (auto r = ShmRegionsMsg::decode(payload); r.ok()) require(r->stamp_bytes >= r->slot_count * 8u);
  if (auto o = ShmOffer::decode(payload); o.ok()) require(!o->socket_name.empty());
  if (auto v = VerbsOffer::decode(payload); v.ok()) require(v->slots.size() >= 2);
  if (auto t = TransportConnectMsg::decode(payload); t.ok()) require(!t->transport.empty());
  if (auto e = VerbsEndpoint::decode(payload); e.ok()) require(e->qp_num != 0 && (e->psn >> 24) == 0);
  if (auto u = UcxOffer::decode(payload); u.ok()) {
    require(u->slots.size() >= 2 && !u->worker_address.empty());
    for (const auto& s : u->slots) require(!s.rkey.empty());
  }
  // Even stamp: a committed version; odd: a streaming lease (never with a checksum).
  if (auto lease = LeaseMsg::decode(payload); lease.ok()) {
    require(lease->version != 0 && (lease->stamp >> 1) == lease->version);
    require(!lease->streaming() || !lease->has_checksum);
  }
  if (auto read = ReadMsg::decode(payload); read.ok()) {
    require(!read->ranges.empty() && read->ranges.size() <= kMaxReadRanges);
    for (const auto& r : read->ranges) require(r.length > 0);
  }
  if (auto table = SlotTableMsg::decode(payload); table.ok()) {
    require(table->slot_count >= 2 && table->transports.size() <= kMaxTransports);
  }
  if (auto f = FetchDeltaMsg::decode(payload); f.ok()) require(f->have > 0 && f->at_least > f->have);
  if (auto d = DeltaMsg::decode(payload); d.ok()) {
    require(!d->links.empty() && d->links.size() <= kMaxDeltaLinks);
    for (std::size_t i = 0; i < d->links.size(); ++i) {
      require(d->links[i].to > d->links[i].from && d->links[i].bytes > 0);
      require(i == 0 || d->links[i].from == d->links[i - 1].to);
    }
  }
  if (auto f = FetchSignatureMsg::decode(payload); f.ok()) require(f->version != 0 && f->version <= (UINT64_MAX >> 1));
  if (auto n = SelectStreamMsg::decode(payload); n.ok()) require(valid_stream_name(n->name));
  // A signature block from a hostile relay: bounded by the reader's own limit,
  // and exactly one digest per chunk of the payload it claims.
  if (auto b = SignatureBlock::decode(payload, 64); b.ok()) {
    require(b->chunks.size() <= 64);
    require((b->chunk_bytes & (b->chunk_bytes - 1)) == 0 && b->chunk_bytes >= kMinSignatureChunkBytes);
    require(b->chunks.size() == b->payload_bytes / b->chunk_bytes + (b->payload_bytes % b->chunk_bytes != 0));
    require(b->encode() == payload);  // nothing accepted that does not re-encode the same
  }
  if (auto layout = WeightLayout::deserialize(data, size); layout.ok()) {
    require(!layout->tensors().empty());
    for (const auto& t : layout->tensors()) {
      require(t.offset % layout->alignment() == 0);
      require(t.bytes > 0 && t.offset + t.bytes <= layout->total_bytes());
    }
    // Re-encoding an accepted layout gives the same layout back.
    auto again = layout->serialize();
    auto back = WeightLayout::deserialize(again.data(), again.size());
    require(back.ok() && *back == *layout);
  }
  return 0;
}
