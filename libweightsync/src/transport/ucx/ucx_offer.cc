// UcxOffer encoding; every length is bounded on decode.
#include "transport/ucx/ucx_offer.h"

#include "common/byte_codec.h"

namespace weightsync::detail {
namespace {
constexpr std::size_t kMaxBlob = 64 * 1024;

void put(ByteWriter& w, const UcxRegion& r) {
  w.u64(r.address);
  w.u64(r.length);
  w.blob32(r.rkey);
}
bool get(ByteReader& r, UcxRegion* out) {
  return r.u64(&out->address) && r.u64(&out->length) && r.blob32(&out->rkey, kMaxBlob) && !out->rkey.empty();
}
}  // namespace

std::vector<std::uint8_t> UcxOffer::encode() const {
  ByteWriter w;
  w.u16(kVersion);
  w.blob32(worker_address);
  w.u32(static_cast<std::uint32_t>(slots.size()));
  for (const auto& s : slots) put(w, s);
  put(w, stamps);
  return w.take();
}

Result<UcxOffer> UcxOffer::decode(const std::vector<std::uint8_t>& blob) {
  ByteReader r(blob.data(), blob.size());
  UcxOffer o;
  std::uint16_t version = 0;
  std::uint32_t count = 0;
  if (!r.u16(&version) || version != kVersion || !r.blob32(&o.worker_address, kMaxBlob) ||
      o.worker_address.empty() || !r.u32(&count) || count < 2 || count > 1024) {
    return Status(ErrorCode::kProtocolError, "malformed ucx offer");
  }
  o.slots.resize(count);
  for (auto& s : o.slots) {
    if (!get(r, &s)) return Status(ErrorCode::kProtocolError, "malformed ucx offer (slot)");
  }
  if (!get(r, &o.stamps) || r.remaining() != 0)
    return Status(ErrorCode::kProtocolError, "malformed ucx offer");
  return o;
}

}  // namespace weightsync::detail
