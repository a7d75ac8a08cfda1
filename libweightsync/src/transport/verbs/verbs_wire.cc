// Encoding of the verbs transport's blobs; every field is bounds-checked.
#include "transport/verbs/verbs_wire.h"

#include "common/byte_codec.h"

namespace weightsync::detail {
namespace {
void put(ByteWriter& w, const VerbsRegion& r) {
  w.u64(r.address);
  w.u64(r.length);
  w.u32(r.rkey);
}
bool get(ByteReader& r, VerbsRegion* out) {
  return r.u64(&out->address) && r.u64(&out->length) && r.u32(&out->rkey) && out->length > 0;
}
}  // namespace

std::vector<std::uint8_t> VerbsOffer::encode() const {
  ByteWriter w;
  w.u16(kVersion);
  w.u32(static_cast<std::uint32_t>(slots.size()));
  for (const auto& s : slots) put(w, s);
  put(w, stamps);
  return w.take();
}

Result<VerbsOffer> VerbsOffer::decode(const std::vector<std::uint8_t>& blob) {
  ByteReader r(blob.data(), blob.size());
  VerbsOffer o;
  std::uint16_t version = 0;
  std::uint32_t count = 0;
  if (!r.u16(&version) || version != kVersion || !r.u32(&count) || count < 2 || count > 1024) {
    return Status(ErrorCode::kProtocolError, "malformed verbs offer");
  }
  o.slots.resize(count);
  for (auto& s : o.slots) {
    if (!get(r, &s)) return Status(ErrorCode::kProtocolError, "malformed verbs offer (slot)");
  }
  if (!get(r, &o.stamps) || r.remaining() != 0)
    return Status(ErrorCode::kProtocolError, "malformed verbs offer");
  return o;
}

std::vector<std::uint8_t> VerbsEndpoint::encode() const {
  ByteWriter w;
  w.u16(kVersion);
  w.u32(qp_num);
  w.u32(psn);
  w.u16(lid);
  w.bytes(gid.data(), gid.size());
  w.u32(mtu);
  return w.take();
}

Result<VerbsEndpoint> VerbsEndpoint::decode(const std::vector<std::uint8_t>& blob) {
  ByteReader r(blob.data(), blob.size());
  VerbsEndpoint e;
  std::uint16_t version = 0;
  if (!r.u16(&version) || version != kVersion || !r.u32(&e.qp_num) || !r.u32(&e.psn) || !r.u16(&e.lid) ||
      !r.bytes(e.gid.data(), e.gid.size()) || !r.u32(&e.mtu) || r.remaining() != 0 || e.qp_num == 0 ||
      (e.psn >> 24) != 0 || e.mtu < 1 || e.mtu > 5) {
    return Status(ErrorCode::kProtocolError, "malformed verbs endpoint");
  }
  return e;
}

}  // namespace weightsync::detail
