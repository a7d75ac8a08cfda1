// Control-protocol messages (docs/protocol.md, "Messages"). Each struct has
// encode() -> payload bytes and decode(payload) -> Result; decode() rejects
// truncated payloads, trailing bytes and out-of-range fields with
// kProtocolError, so handlers only ever see well-formed values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "weightsync/status.h"
#include "wire/frame.h"

namespace weightsync::detail {

inline constexpr std::size_t kNonceBytes = 32;
// AUTH's client_mac and WELCOME's server_mac: 32 bytes on the wire. auth/
// computes and checks them (its Mac, HMAC-SHA256, is the same type).
inline constexpr std::size_t kMacFieldBytes = 32;
inline constexpr std::size_t kMaxClientName = 256;
inline constexpr std::size_t kMaxErrorMessage = 4096;
inline constexpr std::uint32_t kMaxReadRanges = 4096;
inline constexpr std::size_t kMaxTransports = 16;
inline constexpr std::size_t kMaxTransportName = 32;
inline constexpr std::size_t kMaxTransportBlob = 1u << 20;

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using MacField = std::array<std::uint8_t, kMacFieldBytes>;

// kControl: the control plane; kData: the TCP data transport; kShm: the
// same-host shared-memory transport (on the publisher's Unix socket only).
enum class Role : std::uint8_t { kControl = 1, kData = 2, kShm = 3 };

const char* to_string(Role role) noexcept;

struct HelloMsg {
  Role role = Role::kControl;
  std::uint64_t session_id = 0;  // 0 for control; the control session's id for data
  Nonce client_nonce{};
  std::string client_name;
  // Features asked for (auth/integrity.h: kHelloIntegrity, kHelloEncryption), present on the
  // wire only when not zero; the handshake's proofs cover them.
  std::uint8_t features = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<HelloMsg> decode(const std::vector<std::uint8_t>& p);
};

struct ChallengeMsg {
  Nonce server_nonce{};
  bool auth_required = false;
  std::vector<std::uint8_t> encode() const;
  static Result<ChallengeMsg> decode(const std::vector<std::uint8_t>& p);
};

struct AuthMsg {
  MacField client_mac{};  // all zero when the server does not require auth
  std::vector<std::uint8_t> encode() const;
  static Result<AuthMsg> decode(const std::vector<std::uint8_t>& p);
};

struct WelcomeMsg {
  MacField server_mac{};  // proves the server knows the secret; zero without auth
  std::uint64_t session_id = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<WelcomeMsg> decode(const std::vector<std::uint8_t>& p);
};

struct ErrorMsg {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::vector<std::uint8_t> encode() const;
  static Result<ErrorMsg> decode(const std::vector<std::uint8_t>& p);
};

struct LayoutMsg {
  std::vector<std::uint8_t> layout;  // WeightLayout::serialize()
  std::vector<std::uint8_t> encode() const;
  static Result<LayoutMsg> decode(const std::vector<std::uint8_t>& p);
};

struct TransportOffer {
  std::string name;                // "tcp", later "ucx", "shm", "verbs"
  std::vector<std::uint8_t> blob;  // opaque, transport-versioned connection info
};

// Publisher features beyond the original protocol, a mask at the end of
// SLOT_TABLE, present only when not zero (so a publisher with none sends the
// original message). Unknown bits are ignored.
inline constexpr std::uint32_t kFeatureDeltas = 1u;  // FETCH_DELTA is served
// FETCH_SIGNATURE is served: the publisher signs (a signing key) or forwards
// its upstream's blocks (a relay). Without it a subscriber never sends
// FETCH_SIGNATURE (publishers before signatures close the connection on it).
inline constexpr std::uint32_t kFeatureSignatures = 2u;
// With kFeatureDeltas, bits 16..26 carry the publisher's delta_history (1..1024;
// 0 from a publisher before this field): no chain it sends is longer, and a
// subscriber refuses one that is. Older subscribers ignore these bits.
inline constexpr unsigned kFeatureDeltaHistoryShift = 16;
inline constexpr std::uint32_t kFeatureDeltaHistoryMask = 0x7ffu;

struct SlotTableMsg {
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
  bool checksums = false;
  std::vector<TransportOffer> transports;
  std::uint32_t features = 0;  // kFeature* bits
  std::vector<std::uint8_t> encode() const;
  static Result<SlotTableMsg> decode(const std::vector<std::uint8_t>& p);
};

// The streaming extension (docs/protocol.md, "Streaming"): only a subscriber
// whose publisher's tcp offer advertises kTcpFeatureStreaming sends the
// trailing `accept_streaming` flag (QUERY_VERSION, ACQUIRE) or
// WAIT_WATERMARK; without it the messages are exactly the original ones.
struct QueryVersionMsg {
  std::uint64_t newer_than = 0;
  std::uint32_t wait_ms = 0;  // 0: answer at once
  bool accept_streaming = false;  // count versions still being written (encoded only when set)
  std::vector<std::uint8_t> encode() const;
  static Result<QueryVersionMsg> decode(const std::vector<std::uint8_t>& p);
};

// The largest version number: a slot's stamp is version << 1 (| 1 while
// written), so it must fit 63 bits (ring/slot_ring.h refuses more). VERSION,
// LEASE and DELTA naming a larger one are malformed.
inline constexpr std::uint64_t kMaxVersion = UINT64_MAX >> 1;

// VERSION: 0 (nothing published yet) .. kMaxVersion.
struct VersionMsg {
  std::uint64_t latest = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<VersionMsg> decode(const std::vector<std::uint8_t>& p);
};

struct AcquireMsg {
  std::uint64_t newer_than = 0;
  bool accept_streaming = false;  // may lease an in-progress version (encoded only when set)
  std::vector<std::uint8_t> encode() const;
  static Result<AcquireMsg> decode(const std::vector<std::uint8_t>& p);
};

struct LeaseMsg {
  std::uint64_t lease_id = 0;
  std::uint64_t version = 0;
  std::uint32_t slot = 0;
  std::uint64_t stamp = 0;
  bool has_checksum = false;
  std::uint64_t checksum = 0;
  // An odd stamp ((version << 1) | 1): a streaming lease of an in-progress
  // version, granted only to an ACQUIRE with accept_streaming; it never
  // carries a checksum (WATERMARK does, once committed).
  bool streaming() const noexcept { return (stamp & 1) != 0; }
  std::vector<std::uint8_t> encode() const;
  static Result<LeaseMsg> decode(const std::vector<std::uint8_t>& p);
};

struct ReleaseMsg {
  std::uint64_t lease_id = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<ReleaseMsg> decode(const std::vector<std::uint8_t>& p);
};

struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

struct ReadMsg {
  std::uint64_t lease_id = 0;
  std::vector<ByteRange> ranges;  // 1..kMaxReadRanges, each length > 0
  std::vector<std::uint8_t> encode() const;
  static Result<ReadMsg> decode(const std::vector<std::uint8_t>& p);
};

// DATA announces `total` raw bytes that follow the frame unframed.
struct DataMsg {
  std::uint64_t total = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<DataMsg> decode(const std::vector<std::uint8_t>& p);
};

// DATA_END carries the slot's seqlock stamp read after the last byte was sent.
struct DataEndMsg {
  std::uint64_t stamp_after = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<DataEndMsg> decode(const std::vector<std::uint8_t>& p);
};

// WAIT_WATERMARK (control): wait until lease's slot holds its first `bytes`
// bytes (the watermark reaches `bytes`), the version is committed, or the
// version is abandoned (ERROR(kVersionRevoked)), or min(wait_ms, the
// publisher's I/O timeout) passed. bytes == kWaitForCommit waits for the
// commit only.
struct WaitWatermarkMsg {
  static constexpr std::uint64_t kWaitForCommit = UINT64_MAX;
  std::uint64_t lease_id = 0;
  std::uint64_t bytes = 0;
  std::uint32_t wait_ms = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<WaitWatermarkMsg> decode(const std::vector<std::uint8_t>& p);
};

// WATERMARK: the answer. committed: the slot holds the leased version
// committed (stamp version << 1), lease not revoked; watermark is then the
// slot size, and has_checksum/checksum are the committed version's.
struct WatermarkMsg {
  std::uint64_t watermark = 0;
  bool committed = false;
  bool has_checksum = false;
  std::uint64_t checksum = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<WatermarkMsg> decode(const std::vector<std::uint8_t>& p);
};

// Partial pulls and versions across ranks (docs/protocol.md, "Views").
// A view is the list of byte ranges a partial pull reads, in the order it
// reads them, registered once per session in one or more REGISTER_VIEW
// parts; the publisher answers VIEW with its id and entry count. An entry is
// `count` ranges of `length` bytes at `offset + i * stride`.
inline constexpr std::uint32_t kMaxViewEntriesPerMessage = 4000;  // fits kMaxRequestPayload
struct ViewEntry {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t count = 1;
  std::uint64_t stride = 0;
};

struct RegisterViewMsg {
  std::uint32_t view_id = 0;  // 0: a new view; else append to that view of this session
  std::vector<ViewEntry> entries;  // 1..kMaxViewEntriesPerMessage; length, count > 0
  std::vector<std::uint8_t> encode() const;
  static Result<RegisterViewMsg> decode(const std::vector<std::uint8_t>& p);
};

struct ViewMsg {
  std::uint32_t view_id = 0;  // never 0
  std::uint64_t entries = 0;  // entries registered in the view so far
  std::vector<std::uint8_t> encode() const;
  static Result<ViewMsg> decode(const std::vector<std::uint8_t>& p);
};

// ACQUIRE_VIEW: like ACQUIRE, but (exact) exactly `version` rather than the
// newest one newer than it, and (view_id != 0) a LEASE whose checksum is the
// xxHash3-64 of the view's bytes in view order, not of the whole version.
// Refusals: ERROR(kNotReady) not yet published, ERROR(kVersionRevoked) no
// longer held (exact), ERROR(kInvalidArgument) unknown view.
struct AcquireViewMsg {
  std::uint64_t version = 0;  // exact: the version; else newer_than
  bool exact = false;
  std::uint32_t view_id = 0;  // 0: the whole layout
  std::vector<std::uint8_t> encode() const;
  static Result<AcquireViewMsg> decode(const std::vector<std::uint8_t>& p);
};

// Delta versions (docs/protocol.md, "Deltas"). FETCH_DELTA: the subscriber
// holds version `have` and wants a version >= `at_least` (the publisher waits
// up to min(wait_ms, kMaxDeltaWaitMs) for its delta thread to reach it), in
// compressed deltas summing to less than `max_bytes` (what a full pull would
// move). Refusal: ERROR(kNotReady), the connection stays; pull in full.
inline constexpr std::uint32_t kMaxDeltaLinks = 1024;
// Each link costs the subscriber a slot-sized decode and XOR, whatever its
// compressed size: a chain is applied only up to this many links (16 passes
// over the image, a small multiple of a full pull's one). The publisher
// refuses (kNotReady) a longer chain rather than send it; the subscriber
// refuses one longer than this or than the advertised history, before
// applying any link, and pulls in full.
inline constexpr std::uint32_t kMaxDeltaChainApplied = 16;
inline constexpr std::uint32_t kMaxDeltaWaitMs = 2000;
struct FetchDeltaMsg {
  std::uint64_t have = 0;      // > 0
  std::uint64_t at_least = 0;  // > have
  std::uint64_t max_bytes = 0;
  std::uint32_t wait_ms = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<FetchDeltaMsg> decode(const std::vector<std::uint8_t>& p);
};

// DELTA: a chain of links from `have` to the newest version; link i's
// compressed bytes (delta/delta_codec.h) follow the frame unframed, in order.
// Decode checks the chain: 1..kMaxDeltaLinks links, from < to, each starting
// where the previous ended, every size > 0, and element_bytes 1, 2, 4 or 8.
struct DeltaLinkHeader {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint64_t checksum = 0;  // xxHash3 of version `to`'s tensors (layout order)
  std::uint64_t bytes = 0;     // compressed size
};
struct DeltaMsg {
  std::uint8_t element_bytes = 1;
  std::vector<DeltaLinkHeader> links;
  std::uint64_t total_bytes() const;
  std::vector<std::uint8_t> encode() const;
  static Result<DeltaMsg> decode(const std::vector<std::uint8_t>& p);
};

// FETCH_SIGNATURE: the trainer's signature block of `version` (> 0). The
// reply SIGNATURE carries the block as its whole payload (auth/signing.h
// decodes it), or ERROR: kNotReady (not signed yet: ask again),
// kVersionRevoked (it will never have one here), kInvalidConfig (this
// publisher serves no signatures).
struct FetchSignatureMsg {
  std::uint64_t version = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<FetchSignatureMsg> decode(const std::vector<std::uint8_t>& p);
};

// The "tcp" offer blob in SLOT_TABLE. Empty (publishers before streaming,
// and any publisher without features): no features. Else version 1 and a
// feature mask; unknown feature bits are ignored.
inline constexpr std::uint32_t kTcpFeatureStreaming = 1u;
struct TcpOffer {
  static constexpr std::uint16_t kVersion = 1;
  std::uint32_t features = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<TcpOffer> decode(const std::vector<std::uint8_t>& p);
};

// TRANSPORT_CONNECT / TRANSPORT_ACCEPT: a data transport that needs
// per-connection state on the publisher (ibverbs RC queue pairs) exchanges its
// opaque, transport-versioned connection blobs over the authenticated control
// connection. The publisher keeps that state until the session ends.
struct TransportConnectMsg {
  std::string transport;
  std::vector<std::uint8_t> blob;
  std::vector<std::uint8_t> encode() const;
  static Result<TransportConnectMsg> decode(const std::vector<std::uint8_t>& p);
};

// SHM_REGIONS announces the descriptors that follow (one marker byte with
// SCM_RIGHTS): slot_count read-only slot memfds, then the stamp page's.
struct ShmRegionsMsg {
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
  std::uint64_t stamp_bytes = 0;
  std::vector<std::uint8_t> encode() const;
  static Result<ShmRegionsMsg> decode(const std::vector<std::uint8_t>& p);
};

// CUDA_IPC_REGIONS (the cuda_ipc transport, on the local socket, instead of
// SHM_REGIONS when the slots are CUDA memory): one CUDA IPC handle per slot;
// the stamp page's read-only descriptor follows as in SHM_REGIONS.
struct CudaIpcRegionsMsg {
  static constexpr std::size_t kHandleBytes = 64;
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
  std::uint64_t stamp_bytes = 0;
  std::vector<std::array<std::uint8_t, kHandleBytes>> handles;  // slot_count of them
  std::vector<std::uint8_t> encode() const;
  static Result<CudaIpcRegionsMsg> decode(const std::vector<std::uint8_t>& p);
};

// The "shm" transport's offer blob in SLOT_TABLE (versioned): which host the
// publisher runs on (kernel boot id) and its abstract Unix socket's name.
struct ShmOffer {
  static constexpr std::uint16_t kVersion = 1;
  std::string boot_id;
  std::string socket_name;
  std::vector<std::uint8_t> encode() const;
  static Result<ShmOffer> decode(const std::vector<std::uint8_t>& p);
};

}  // namespace weightsync::detail
