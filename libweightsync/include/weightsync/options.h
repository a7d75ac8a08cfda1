// weightsync/options.h: configuration of publishers and subscribers.
//
// Contract
// - Every setting is resolved as: explicit option (a set std::optional, or a
//   non-default field documented as such) > WEIGHTSYNC_* environment variable >
//   built-in default. The resolved values and where each came from are logged
//   at info level when a Publisher or Subscriber starts.
// - Environment variables (all optional), one per row of the library's
//   settings table (src/common/settings_table.cc; describe_settings() and
//   weightsync-info report each with its source; a unit test keeps this list
//   and the table equal):
//     WEIGHTSYNC_SECRET              shared secret for peer authentication
//     WEIGHTSYNC_BIND                publisher bind address (default 127.0.0.1; localhost is 127.0.0.1)
//     WEIGHTSYNC_TIMEOUT_MS          I/O timeout on a stalled peer (default 10000)
//     WEIGHTSYNC_HANDSHAKE_TIMEOUT_MS  time a new connection has to authenticate (default 2000)
//     WEIGHTSYNC_IDLE_TIMEOUT_MS     close authenticated connections silent this long (default 0: never)
//     WEIGHTSYNC_LEASE_TIMEOUT_MS    age after which a lease may be taken back, any policy (default 60000)
//     WEIGHTSYNC_CONNECT_TIMEOUT_MS  connect + handshake timeout (default 5000)
//     WEIGHTSYNC_TRANSPORT           data transport: auto | verbs | ucx | cuda_ipc | shm | tcp
//     WEIGHTSYNC_CHECKSUM            publisher computes xxHash3 per version: 0 | 1
//     WEIGHTSYNC_DELTAS              publisher computes delta versions: 0 | 1
//     WEIGHTSYNC_INTEGRITY           keyed version tags and sealed control frames (both sides): 0 | 1
//     WEIGHTSYNC_ENCRYPTION          AES-128-GCM records on every TCP connection (both sides): 0 | 1
//     WEIGHTSYNC_SIGNING_KEY         publisher: Ed25519 private key (PEM file) that signs every version
//     WEIGHTSYNC_TRUSTED_KEY         subscriber: the trainer's Ed25519 public key (PEM file) to check
//     WEIGHTSYNC_SLOT_ALLOCATOR      who allocates the slots: auto | memfd | ucx (default auto)
//   Read where they are used (reported, not options):
//     WEIGHTSYNC_HOST_ID             this process's host for shm/cuda_ipc (default: boot id + netns)
//     WEIGHTSYNC_TCP_RCVLOWAT        0: a tcp pull wakes per arrival, not once 1 MiB is queued
//     WEIGHTSYNC_VERBS_DEVICE        RDMA device for verbs (default: first with an active port)
//     WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA  1: INSECURE, any peer can read and write the trainer's memory
//     WEIGHTSYNC_UCX_DIRECT          0: ucx subscribers read with ucp_get_nbx, not mapping the slots
//     UCX_TLS                        UCX's own: the UCX transports it may use (default: all)
//     WEIGHTSYNC_LOG_LEVEL           error | warn | info | debug | trace (default warn)
//   Read by the weightsync-relay daemon (tools/relay; its flags win):
//     WEIGHTSYNC_RELAY_UPSTREAMS     upstream HOST:PORT list, comma-separated, failover in order
//     WEIGHTSYNC_RELAY_LISTEN        HOST:PORT its subscribers connect to (default: WEIGHTSYNC_BIND, a free port)
//     WEIGHTSYNC_RELAY_HEALTH_ADDRESS  HTTP /livez and /readyz on HOST:PORT (default off; loopback host)
//     WEIGHTSYNC_RELAY_METRICS_ADDRESS Prometheus /metrics on HOST:PORT (default off; loopback host)
//     WEIGHTSYNC_RELAY_SLOTS         slots of its ring (default 3)
//   A malformed value is a kInvalidConfig error naming the variable.
// - An empty secret means "no secret": the publisher then refuses to bind to a
//   non-loopback address, and a subscriber with a secret refuses a publisher
//   that cannot prove it knows the same secret.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "weightsync/memory.h"

namespace weightsync {

// What publish() does when every slot other than the newest is leased.
enum class FullRingPolicy : std::uint8_t {
  // Take back the slot holding the oldest version: readers of it get
  // kVersionRevoked (and, with Subscriber's automatic retry, pull the newest
  // version instead). The default: the trainer never waits and always lands.
  kRevokeOldest = 0,
  // Do not publish this version: publish() returns kBusy and the ring is
  // untouched. A reader's newest lease is never disturbed before
  // lease_timeout_ms; a session's older leases (superseded by a lease it
  // holds on a newer version) may be taken back, so one session holds at
  // most one slot against the trainer.
  kSkip = 1,
};

struct PublisherOptions {
  // Address to listen on. nullopt: WEIGHTSYNC_BIND, else "127.0.0.1".
  // Without a secret only loopback addresses are accepted.
  std::optional<std::string> bind_address;
  // TCP port; 0 picks a free one (see Publisher::address()).
  std::uint16_t port = 0;
  // nullopt: WEIGHTSYNC_SECRET, else none. "" means none.
  std::optional<std::string> secret;
  // Ring size, >= 2. Three lets a reader finish a version while the trainer
  // writes the next without revocations.
  std::size_t slots = 3;
  FullRingPolicy full_ring_policy = FullRingPolicy::kRevokeOldest;
  // kHost (default): page-aligned host memory every transport can read.
  // kCuda: device memory on the current CUDA device, readable only by the
  // cuda_ipc transport (subscribers on this host); see publisher.h.
  // Compute an xxHash3-64 of each version so subscribers can verify it.
  // nullopt: WEIGHTSYNC_CHECKSUM, else false.
  std::optional<bool> checksum;
  MemoryKind slot_memory = MemoryKind::kHost;
  // Who allocates the slot memory: "memfd" (sealed shared memory; local
  // subscribers can use the shm transport), "ucx" (ucp_mem_map allocates it:
  // UCX's shared-memory transports give one-sided access only to memory they
  // allocated; the shm transport is then not offered), or "auto": "ucx" when
  // the UCX transport is offered and UCX_TLS names posix, sysv, sm or shm,
  // else "memfd". nullopt: WEIGHTSYNC_SLOT_ALLOCATOR, else "auto".
  std::optional<std::string> slot_allocator;
  // mlock the slots (pinned pages); fails loudly if RLIMIT_MEMLOCK is too low.
  bool lock_memory = false;
  // Send/receive stall limit per peer. nullopt: WEIGHTSYNC_TIMEOUT_MS, else 10000.
  std::optional<int> io_timeout_ms;
  // Most authenticated connections served at once (each subscriber uses a
  // control one and, over tcp, a data one). Connections still in the
  // handshake do not count here; they have their own budget below. A
  // connection turned away for capacity is sent ERROR(kBusy) before it is
  // closed, and subscribers back off and retry.
  std::size_t max_connections = 256;
  // Budget of connections that have not authenticated yet: at most
  // `max_handshakes` at once, at most `max_handshakes_per_address` from one
  // source address, each closed if it has not finished the handshake within
  // `handshake_timeout_ms` of being accepted (never more than the I/O
  // timeout). Past either cap the connection that has waited longest for its
  // peer (from the same address, if that address is over its cap) is sent
  // ERROR(kBusy) and closed: a flood evicts itself, while a subscriber that
  // answers promptly gets through. Peers on this host share no per-address
  // cap. handshake_timeout_ms nullopt: WEIGHTSYNC_HANDSHAKE_TIMEOUT_MS, else 2000.
  std::size_t max_handshakes = 64;
  std::size_t max_handshakes_per_address = 16;
  std::optional<int> handshake_timeout_ms;
  // An authenticated connection that sends nothing for this long is sent
  // ERROR(kTimeout) and closed (and its leases released); its subscriber's
  // next call fails with kTimeout or kConnectionLost: reconnect. 0: never (TCP keepalive and TCP_USER_TIMEOUT still detect a dead
  // host). nullopt: WEIGHTSYNC_IDLE_TIMEOUT_MS, else 0.
  std::optional<int> idle_timeout_ms;
  // Leases older than this may be taken back to make room for a new version
  // under every FullRingPolicy: under kSkip a version is skipped only while
  // every candidate slot has a lease younger than this. Bounds how long one
  // reader (stalled, stopped or hostile) can freeze publishing. The reader of
  // a revoked lease gets kVersionRevoked. nullopt: WEIGHTSYNC_LEASE_TIMEOUT_MS,
  // else 60000.
  std::optional<int> lease_timeout_ms;
  // Delta versions for slow links (docs/slow_links.md): after each commit a
  // thread of the publisher encodes the version against the previous one
  // (XOR, byte-transposed, zstd at `delta_level`) and keeps the newest
  // `delta_history` deltas; a subscriber holding an older version may then
  // pull the chain of deltas instead of the whole version
  // (PullOptions::delta_base). Costs three slot-sized host buffers and one
  // core for a few ms per version; host slots only. nullopt:
  // WEIGHTSYNC_DELTAS, else false.
  std::optional<bool> deltas;
  // 1..1024, advertised to subscribers; a chain is at most 16 links whatever
  // this says (each link costs the subscriber a slot-sized decode and XOR),
  // so a subscriber more than 16 versions behind pulls in full.
  std::size_t delta_history = 8;
  int delta_level = 1;
  // The integrity layer for untrusted links (docs/security.md, "Integrity"):
  // every version's checksum becomes a tag keyed by the secret (HMAC-SHA256,
  // 64 bits), so bytes changed in transit are caught, and every control frame
  // after the handshake is sealed (HMAC-SHA256 over a sequence number, its
  // type and its payload). Needs a secret and host slots; turns checksums on.
  // Every subscriber must ask for it too (SubscriberOptions::integrity), and
  // one that asks is refused by a publisher without it. Costs one HMAC pass
  // over each version at commit (docs/slow_links.md has the rate). nullopt:
  // WEIGHTSYNC_INTEGRITY, else false.
  std::optional<bool> integrity;
  // Encryption for links outside a private fabric (docs/security.md,
  // "Encryption"): implies integrity, and every TCP connection (control and
  // data) carries every byte after its handshake in AES-128-GCM records under
  // keys derived from the secret and that connection's handshake. UCX and
  // verbs are not offered (one-sided reads cannot be encrypted); same-host
  // shared memory still is. Every subscriber must ask for it too
  // (SubscriberOptions::encryption). Costs one AES-GCM pass per byte sent
  // (docs/slow_links.md has the rate). nullopt: WEIGHTSYNC_ENCRYPTION, else
  // false.
  std::optional<bool> encryption;
  // Versions the trainer signs (docs/security.md, "Versions the trainer
  // signs"): the path of an Ed25519 private key in PEM (`openssl genpkey
  // -algorithm ed25519 -out trainer-key.pem`). A thread of the publisher then
  // hashes each committed version (SHA-256 per MiB of payload) and signs the
  // version number, the layout and those digests, off the publishing thread;
  // subscribers holding the public key (SubscriberOptions::trusted_key)
  // accept only bytes that match, through any number of relays. Host slots
  // only. nullopt: WEIGHTSYNC_SIGNING_KEY, else none ("" means none).
  std::optional<std::string> signing_key;
};

struct SubscriberOptions {
  // nullopt: WEIGHTSYNC_SECRET, else none. "" means none.
  std::optional<std::string> secret;
  // nullopt: WEIGHTSYNC_CONNECT_TIMEOUT_MS, else 5000.
  std::optional<int> connect_timeout_ms;
  // nullopt: WEIGHTSYNC_TIMEOUT_MS, else 10000.
  std::optional<int> io_timeout_ms;
  // "auto" or a transport name ("shm", "tcp"; see available_transports()).
  // nullopt: WEIGHTSYNC_TRANSPORT, else "auto".
  std::optional<std::string> transport;
  // Verify the publisher's checksum when it provides one.
  bool verify_checksum = true;
  // Pulls retried automatically after kVersionRevoked or kChecksumMismatch.
  int max_retries = 16;
  // Shown in the publisher's logs.
  std::string client_name = "subscriber";
  // The adapter to pull from an AdapterPublisher (weightsync/adapter_publisher.h):
  // 1..64 bytes of [A-Za-z0-9._-]; the session is bound to it. Empty: the
  // publisher's base model. An unknown name fails connect() with
  // kInvalidConfig, listing the names served; a publisher that serves no
  // adapters fails it with kProtocolError.
  std::string adapter;
  // Pulls into CUDA memory over a transport that cannot write it directly go
  // through a ring of `staging_chunks` page-locked host chunks of
  // `staging_chunk_bytes` each: the network read of one chunk overlaps the
  // host-to-device copy of the previous ones. Allocated on the first such
  // pull and kept. staging_chunks >= 2; staging_chunk_bytes >= 64 KiB.
  std::size_t staging_chunk_bytes = 8u << 20;
  std::size_t staging_chunks = 3;
  // Pull a version the publisher (a pipelined relay) is still receiving,
  // reading its bytes as they are written (docs/relays.md, "The pipelined
  // chain"). Used only over the tcp transport, into host memory, and only
  // from a publisher that offers it; otherwise ignored (whole committed
  // versions). A streamed version is delivered only once it was committed
  // whole in the same slot and, with checksums, verified. With it,
  // wait_for_version()/latest_version() also report in-progress versions.
  // Relays with RelayOptions::pipelined set it for their upstream pulls.
  bool accept_streaming = false;
  // The integrity layer (PublisherOptions::integrity): ask for it; verifies
  // every pull's keyed tag (verify_checksum is then always on) and seals the
  // control frames. A publisher without it refuses this subscriber. nullopt:
  // WEIGHTSYNC_INTEGRITY, else false.
  std::optional<bool> integrity;
  // Encryption (PublisherOptions::encryption): ask for it; implies integrity.
  // Only tcp (encrypted) and same-host transports are then used. A publisher
  // without it refuses this subscriber, and one with it refuses subscribers
  // that do not ask. nullopt: WEIGHTSYNC_ENCRYPTION, else false.
  std::optional<bool> encryption;
  // The trainer's Ed25519 public key in PEM (PublisherOptions::signing_key;
  // `openssl pkey -in trainer-key.pem -pubout -out trainer-pub.pem`),
  // configured apart from the secret. With it every whole pull (full, by
  // deltas or streamed) is accepted only if the version carries the trainer's
  // signature for that version number and this layout, and its bytes match
  // the signed digests: a relay or anyone holding the secret cannot change
  // what arrives. A version without a valid signature fails with kAuthFailed,
  // bytes that differ with kChecksumMismatch (retried, then returned).
  // Partial pulls and pulls into CUDA memory cannot be verified this way and
  // are refused (kInvalidArgument) while it is set. nullopt:
  // WEIGHTSYNC_TRUSTED_KEY, else none ("" means none).
  std::optional<std::string> trusted_key;
};

}  // namespace weightsync
