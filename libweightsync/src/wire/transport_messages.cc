// Encoding and validation of the data-plane messages and transport offers:
// READ/DATA/DATA_END, TRANSPORT_CONNECT, the same-host regions frames, and
// the tcp and shm offer blobs (docs/protocol.md).
#include "common/byte_codec.h"
#include "wire/message_codec.h"
#include "wire/messages.h"

namespace weightsync::detail {

std::vector<std::uint8_t> TcpOffer::encode() const {
  if (features == 0) return {};
  ByteWriter w;
  w.u16(kVersion);
  w.u32(features);
  return w.take();
}

Result<TcpOffer> TcpOffer::decode(const std::vector<std::uint8_t>& p) {
  TcpOffer m;
  if (p.empty()) return m;
  ByteReader r(p.data(), p.size());
  std::uint16_t version = 0;
  if (!r.u16(&version) || version != kVersion || !r.u32(&m.features) || !finish(r)) {
    return malformed("tcp offer");
  }
  return m;
}

std::vector<std::uint8_t> ReadMsg::encode() const {
  ByteWriter w;
  w.reserve(12 + 16 * ranges.size());
  w.u64(lease_id);
  w.u32(static_cast<std::uint32_t>(ranges.size()));
  for (const auto& range : ranges) {
    w.u64(range.offset);
    w.u64(range.length);
  }
  return w.take();
}

Result<ReadMsg> ReadMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  ReadMsg m;
  std::uint32_t count = 0;
  if (!r.u64(&m.lease_id) || !r.u32(&count) || count == 0 || count > kMaxReadRanges ||
      static_cast<std::uint64_t>(count) * 16 != r.remaining()) {
    return malformed("READ");
  }
  m.ranges.resize(count);
  for (auto& range : m.ranges) {
    r.u64(&range.offset);
    r.u64(&range.length);
    if (range.length == 0) return malformed("READ (empty range)");
  }
  return m;
}

std::vector<std::uint8_t> DataMsg::encode() const {
  ByteWriter w;
  w.u64(total);
  return w.take();
}

Result<DataMsg> DataMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  DataMsg m;
  if (!r.u64(&m.total) || !finish(r)) return malformed("DATA");
  return m;
}

std::vector<std::uint8_t> DataEndMsg::encode() const {
  ByteWriter w;
  w.u64(stamp_after);
  return w.take();
}

Result<DataEndMsg> DataEndMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  DataEndMsg m;
  if (!r.u64(&m.stamp_after) || !finish(r)) return malformed("DATA_END");
  return m;
}

std::vector<std::uint8_t> TransportConnectMsg::encode() const {
  ByteWriter w;
  w.str16(transport);
  w.blob32(blob);
  return w.take();
}

Result<TransportConnectMsg> TransportConnectMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  TransportConnectMsg m;
  if (!r.str16(&m.transport, kMaxTransportName) || m.transport.empty() || !r.blob32(&m.blob, 64 * 1024) ||
      !finish(r)) {
    return malformed("TRANSPORT_CONNECT/ACCEPT");
  }
  return m;
}

std::vector<std::uint8_t> ShmRegionsMsg::encode() const {
  ByteWriter w;
  w.u32(slot_count);
  w.u64(slot_bytes);
  w.u64(stamp_bytes);
  return w.take();
}

Result<ShmRegionsMsg> ShmRegionsMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  ShmRegionsMsg m;
  if (!r.u32(&m.slot_count) || !r.u64(&m.slot_bytes) || !r.u64(&m.stamp_bytes) || !finish(r)) {
    return malformed("SHM_REGIONS");
  }
  if (m.slot_count < 2 || m.slot_count > 1024 || m.slot_bytes == 0 ||
      m.stamp_bytes < m.slot_count * sizeof(std::uint64_t)) {
    return malformed("SHM_REGIONS (sizes)");
  }
  return m;
}

std::vector<std::uint8_t> CudaIpcRegionsMsg::encode() const {
  ByteWriter w;
  w.u32(slot_count);
  w.u64(slot_bytes);
  w.u64(stamp_bytes);
  for (const auto& h : handles) w.bytes(h.data(), h.size());
  return w.take();
}

Result<CudaIpcRegionsMsg> CudaIpcRegionsMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  CudaIpcRegionsMsg m;
  if (!r.u32(&m.slot_count) || !r.u64(&m.slot_bytes) || !r.u64(&m.stamp_bytes)) {
    return malformed("CUDA_IPC_REGIONS");
  }
  if (m.slot_count < 2 || m.slot_count > 1024 || m.slot_bytes == 0 ||
      m.stamp_bytes < m.slot_count * sizeof(std::uint64_t)) {
    return malformed("CUDA_IPC_REGIONS (sizes)");
  }
  m.handles.resize(m.slot_count);
  for (auto& h : m.handles) {
    if (!r.bytes(h.data(), h.size())) return malformed("CUDA_IPC_REGIONS (handles)");
  }
  if (!finish(r)) return malformed("CUDA_IPC_REGIONS");
  return m;
}

std::vector<std::uint8_t> ShmOffer::encode() const {
  ByteWriter w;
  w.u16(kVersion);
  w.str16(boot_id);
  w.str16(socket_name);
  return w.take();
}

Result<ShmOffer> ShmOffer::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  ShmOffer m;
  std::uint16_t version = 0;
  if (!r.u16(&version) || version != kVersion || !r.str16(&m.boot_id, 64) || !r.str16(&m.socket_name, 100) ||
      !finish(r) || m.socket_name.empty()) {
    return malformed("shm offer");
  }
  return m;
}

}  // namespace weightsync::detail
