// Encoding and validation of control-protocol messages.
#include "wire/messages.h"

#include "common/byte_codec.h"
#include "wire/message_codec.h"

namespace weightsync::detail {

const char* to_string(Role role) noexcept {
  switch (role) {
    case Role::kControl: return "control";
    case Role::kData: return "data";
    case Role::kShm: return "shm";
  }
  return "unknown";
}

std::vector<std::uint8_t> HelloMsg::encode() const {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(role));
  w.u64(session_id);
  w.bytes(client_nonce.data(), client_nonce.size());
  w.str16(client_name.substr(0, kMaxClientName));
  if (features != 0) w.u8(features);
  return w.take();
}

Result<HelloMsg> HelloMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  HelloMsg m;
  std::uint8_t role = 0;
  if (!r.u8(&role) || role < 1 || role > 3 || !r.u64(&m.session_id) ||
      !r.bytes(m.client_nonce.data(), kNonceBytes) || !r.str16(&m.client_name, kMaxClientName)) {
    return malformed("HELLO");
  }
  // The feature bits: present only when not zero; bit 0 integrity, bit 1 encryption.
  if (r.remaining() > 0 && (!r.u8(&m.features) || m.features == 0 || m.features > 3)) {
    return malformed("HELLO (features)");
  }
  if (!finish(r)) return malformed("HELLO");
  m.role = static_cast<Role>(role);
  if ((m.role == Role::kControl) != (m.session_id == 0)) return malformed("HELLO (role/session)");
  return m;
}

std::vector<std::uint8_t> ChallengeMsg::encode() const {
  ByteWriter w;
  w.bytes(server_nonce.data(), server_nonce.size());
  w.u8(auth_required ? 1 : 0);
  return w.take();
}

Result<ChallengeMsg> ChallengeMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  ChallengeMsg m;
  if (!r.bytes(m.server_nonce.data(), kNonceBytes) || !read_flag(r, &m.auth_required) || !finish(r)) {
    return malformed("CHALLENGE");
  }
  return m;
}

std::vector<std::uint8_t> AuthMsg::encode() const {
  ByteWriter w;
  w.bytes(client_mac.data(), client_mac.size());
  return w.take();
}

Result<AuthMsg> AuthMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  AuthMsg m;
  if (!r.bytes(m.client_mac.data(), kMacFieldBytes) || !finish(r)) return malformed("AUTH");
  return m;
}

std::vector<std::uint8_t> WelcomeMsg::encode() const {
  ByteWriter w;
  w.bytes(server_mac.data(), server_mac.size());
  w.u64(session_id);
  return w.take();
}

Result<WelcomeMsg> WelcomeMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  WelcomeMsg m;
  if (!r.bytes(m.server_mac.data(), kMacFieldBytes) || !r.u64(&m.session_id) || !finish(r)) {
    return malformed("WELCOME");
  }
  return m;
}

std::vector<std::uint8_t> ErrorMsg::encode() const {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(code));
  w.str16(message.substr(0, kMaxErrorMessage));
  return w.take();
}

Result<ErrorMsg> ErrorMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  ErrorMsg m;
  std::uint8_t code = 0;
  if (!r.u8(&code) || code == 0 || code > static_cast<std::uint8_t>(ErrorCode::kInternal) ||
      !r.str16(&m.message, kMaxErrorMessage) || !finish(r)) {
    return malformed("ERROR");
  }
  m.code = static_cast<ErrorCode>(code);
  return m;
}

std::vector<std::uint8_t> LayoutMsg::encode() const {
  ByteWriter w;
  w.blob32(layout);
  return w.take();
}

Result<LayoutMsg> LayoutMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  LayoutMsg m;
  if (!r.blob32(&m.layout, kMaxReplyPayload) || !finish(r)) return malformed("LAYOUT");
  return m;
}

std::vector<std::uint8_t> SlotTableMsg::encode() const {
  ByteWriter w;
  w.u32(slot_count);
  w.u64(slot_bytes);
  w.u8(checksums ? 1 : 0);
  w.u8(static_cast<std::uint8_t>(transports.size()));
  for (const auto& t : transports) {
    w.str16(t.name);
    w.blob32(t.blob);
  }
  if (features != 0) w.u32(features);
  return w.take();
}

Result<SlotTableMsg> SlotTableMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  SlotTableMsg m;
  std::uint8_t count = 0;
  if (!r.u32(&m.slot_count) || !r.u64(&m.slot_bytes) || !read_flag(r, &m.checksums) || !r.u8(&count) ||
      count > kMaxTransports) {
    return malformed("SLOT_TABLE");
  }
  if (m.slot_count < 2 || m.slot_count > 1024 || m.slot_bytes == 0) return malformed("SLOT_TABLE (slots)");
  m.transports.resize(count);
  for (auto& t : m.transports) {
    if (!r.str16(&t.name, kMaxTransportName) || !r.blob32(&t.blob, kMaxTransportBlob)) {
      return malformed("SLOT_TABLE (transport)");
    }
  }
  if (r.remaining() > 0) {
    // The feature mask: present only when not zero (one encoding per value).
    if (!r.u32(&m.features) || m.features == 0) return malformed("SLOT_TABLE (features)");
  }
  if (!finish(r)) return malformed("SLOT_TABLE");
  return m;
}

std::vector<std::uint8_t> QueryVersionMsg::encode() const {
  ByteWriter w;
  w.u64(newer_than);
  w.u32(wait_ms);
  if (accept_streaming) w.u8(1);
  return w.take();
}

Result<QueryVersionMsg> QueryVersionMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  QueryVersionMsg m;
  if (!r.u64(&m.newer_than) || !r.u32(&m.wait_ms)) return malformed("QUERY_VERSION");
  if (r.remaining() > 0) {
    // The streaming flag: present only when set (one encoding per value).
    if (!read_flag(r, &m.accept_streaming) || !m.accept_streaming) return malformed("QUERY_VERSION (flag)");
  }
  if (!finish(r)) return malformed("QUERY_VERSION");
  return m;
}

std::vector<std::uint8_t> VersionMsg::encode() const {
  ByteWriter w;
  w.u64(latest);
  return w.take();
}

Result<VersionMsg> VersionMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  VersionMsg m;
  if (!r.u64(&m.latest) || !finish(r)) return malformed("VERSION");
  if (m.latest > kMaxVersion) return malformed("VERSION (beyond the largest version 2^63-1)");
  return m;
}

std::vector<std::uint8_t> AcquireMsg::encode() const {
  ByteWriter w;
  w.u64(newer_than);
  if (accept_streaming) w.u8(1);
  return w.take();
}

Result<AcquireMsg> AcquireMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  AcquireMsg m;
  if (!r.u64(&m.newer_than)) return malformed("ACQUIRE");
  if (r.remaining() > 0) {
    if (!read_flag(r, &m.accept_streaming) || !m.accept_streaming) return malformed("ACQUIRE (flag)");
  }
  if (!finish(r)) return malformed("ACQUIRE");
  return m;
}

std::vector<std::uint8_t> LeaseMsg::encode() const {
  ByteWriter w;
  w.u64(lease_id);
  w.u64(version);
  w.u32(slot);
  w.u64(stamp);
  w.u8(has_checksum ? 1 : 0);
  w.u64(checksum);
  return w.take();
}

Result<LeaseMsg> LeaseMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  LeaseMsg m;
  if (!r.u64(&m.lease_id) || !r.u64(&m.version) || !r.u32(&m.slot) || !r.u64(&m.stamp) ||
      !read_flag(r, &m.has_checksum) || !r.u64(&m.checksum) || !finish(r)) {
    return malformed("LEASE");
  }
  if (m.version == 0 || m.version > kMaxVersion || (m.stamp >> 1) != m.version) {
    return malformed("LEASE (stamp)");
  }
  if (m.streaming() && (m.has_checksum || m.checksum != 0)) return malformed("LEASE (streaming checksum)");
  return m;
}

std::vector<std::uint8_t> WaitWatermarkMsg::encode() const {
  ByteWriter w;
  w.u64(lease_id);
  w.u64(bytes);
  w.u32(wait_ms);
  return w.take();
}

Result<WaitWatermarkMsg> WaitWatermarkMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  WaitWatermarkMsg m;
  if (!r.u64(&m.lease_id) || !r.u64(&m.bytes) || !r.u32(&m.wait_ms) || !finish(r)) {
    return malformed("WAIT_WATERMARK");
  }
  return m;
}

std::vector<std::uint8_t> WatermarkMsg::encode() const {
  ByteWriter w;
  w.u64(watermark);
  w.u8(committed ? 1 : 0);
  w.u8(has_checksum ? 1 : 0);
  w.u64(checksum);
  return w.take();
}

Result<WatermarkMsg> WatermarkMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  WatermarkMsg m;
  if (!r.u64(&m.watermark) || !read_flag(r, &m.committed) || !read_flag(r, &m.has_checksum) ||
      !r.u64(&m.checksum) || !finish(r)) {
    return malformed("WATERMARK");
  }
  // A checksum exists only for a committed version.
  if (!m.committed && (m.has_checksum || m.checksum != 0)) return malformed("WATERMARK (checksum)");
  if (!m.has_checksum && m.checksum != 0) return malformed("WATERMARK (checksum)");
  return m;
}

std::vector<std::uint8_t> RegisterViewMsg::encode() const {
  ByteWriter w;
  w.u32(view_id);
  w.u32(static_cast<std::uint32_t>(entries.size()));
  for (const auto& e : entries) {
    w.u64(e.offset);
    w.u64(e.length);
    w.u64(e.count);
    w.u64(e.stride);
  }
  return w.take();
}

Result<RegisterViewMsg> RegisterViewMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  RegisterViewMsg m;
  std::uint32_t count = 0;
  if (!r.u32(&m.view_id) || !r.u32(&count) || count == 0 || count > kMaxViewEntriesPerMessage ||
      static_cast<std::uint64_t>(count) * 32 != r.remaining()) {
    return malformed("REGISTER_VIEW");
  }
  m.entries.resize(count);
  for (auto& e : m.entries) {
    if (!r.u64(&e.offset) || !r.u64(&e.length) || !r.u64(&e.count) || !r.u64(&e.stride))
      return malformed("REGISTER_VIEW");
    if (e.length == 0 || e.count == 0) return malformed("REGISTER_VIEW (empty entry)");
  }
  if (!finish(r)) return malformed("REGISTER_VIEW");
  return m;
}

std::vector<std::uint8_t> ViewMsg::encode() const {
  ByteWriter w;
  w.u32(view_id);
  w.u64(entries);
  return w.take();
}

Result<ViewMsg> ViewMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  ViewMsg m;
  if (!r.u32(&m.view_id) || !r.u64(&m.entries) || !finish(r) || m.view_id == 0) return malformed("VIEW");
  return m;
}

std::vector<std::uint8_t> AcquireViewMsg::encode() const {
  ByteWriter w;
  w.u64(version);
  w.u8(exact ? 1 : 0);
  w.u32(view_id);
  return w.take();
}

Result<AcquireViewMsg> AcquireViewMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  AcquireViewMsg m;
  if (!r.u64(&m.version) || !read_flag(r, &m.exact) || !r.u32(&m.view_id) || !finish(r))
    return malformed("ACQUIRE_VIEW");
  if (m.exact && m.version == 0) return malformed("ACQUIRE_VIEW (version 0)");
  return m;
}

std::vector<std::uint8_t> ReleaseMsg::encode() const {
  ByteWriter w;
  w.u64(lease_id);
  return w.take();
}

Result<ReleaseMsg> ReleaseMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  ReleaseMsg m;
  if (!r.u64(&m.lease_id) || !finish(r)) return malformed("RELEASE");
  return m;
}

std::vector<std::uint8_t> FetchDeltaMsg::encode() const {
  ByteWriter w;
  w.u64(have);
  w.u64(at_least);
  w.u64(max_bytes);
  w.u32(wait_ms);
  return w.take();
}

Result<FetchDeltaMsg> FetchDeltaMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  FetchDeltaMsg m;
  if (!r.u64(&m.have) || !r.u64(&m.at_least) || !r.u64(&m.max_bytes) || !r.u32(&m.wait_ms) || !finish(r)) {
    return malformed("FETCH_DELTA");
  }
  if (m.have == 0 || m.at_least <= m.have) return malformed("FETCH_DELTA (versions)");
  return m;
}

std::vector<std::uint8_t> FetchSignatureMsg::encode() const {
  ByteWriter w;
  w.u64(version);
  return w.take();
}

Result<FetchSignatureMsg> FetchSignatureMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  FetchSignatureMsg m;
  if (!r.u64(&m.version) || !finish(r) || m.version == 0 || m.version > (UINT64_MAX >> 1)) {
    return malformed("FETCH_SIGNATURE");
  }
  return m;
}

std::uint64_t DeltaMsg::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& link : links) total += link.bytes;  // decode bounds each, so no overflow
  return total;
}

std::vector<std::uint8_t> DeltaMsg::encode() const {
  ByteWriter w;
  w.u8(element_bytes);
  w.u32(static_cast<std::uint32_t>(links.size()));
  for (const auto& link : links) {
    w.u64(link.from);
    w.u64(link.to);
    w.u64(link.checksum);
    w.u64(link.bytes);
  }
  return w.take();
}

Result<DeltaMsg> DeltaMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  DeltaMsg m;
  std::uint32_t count = 0;
  if (!r.u8(&m.element_bytes) || !r.u32(&count)) return malformed("DELTA");
  if (m.element_bytes != 1 && m.element_bytes != 2 && m.element_bytes != 4 && m.element_bytes != 8) {
    return malformed("DELTA (element width)");
  }
  if (count == 0 || count > kMaxDeltaLinks || r.remaining() != std::size_t{count} * 32)
    return malformed("DELTA (links)");
  m.links.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    DeltaLinkHeader& link = m.links[i];
    if (!r.u64(&link.from) || !r.u64(&link.to) || !r.u64(&link.checksum) || !r.u64(&link.bytes)) {
      return malformed("DELTA (link)");
    }
    // Each link under 1 TiB: a sum of kMaxDeltaLinks of them cannot overflow.
    if (link.from == 0 || link.to <= link.from || link.to > kMaxVersion || link.bytes == 0 ||
        link.bytes > (std::uint64_t{1} << 40) || (i > 0 && link.from != m.links[i - 1].to)) {
      return malformed("DELTA (chain)");
    }
  }
  if (!finish(r)) return malformed("DELTA");
  return m;
}

}  // namespace weightsync::detail
