// Versions the trainer signs (docs/security.md, "Versions the trainer signs";
// docs/protocol.md, "Signatures").
//
// Every subscriber and relay holds the shared secret, so anything keyed by it
// (the integrity layer's tags) can be forged by any of them. A signature is
// not: the trainer alone holds an Ed25519 private key, and subscribers hold
// its public key, configured apart from the secret. For each version the
// trainer signs a statement of
//   - the version number,
//   - the SHA-256 of its layout (names, shapes, dtypes, offsets),
//   - the payload size, and
//   - the SHA-256 of each kSignatureChunkBytes chunk of the payload (the
//     tensors' bytes in layout order, padding excluded: what a whole pull
//     delivers, contiguous or scattered),
// and a SignatureBlock carries the statement, the chunk digests and the
// signature. Relays forward the block unchanged; a subscriber verifies the
// signature with the trainer's key, checks that the statement names the
// version it pulled and the layout it holds, and hashes what it received
// chunk by chunk. A leaf behind any number of relays then accepts only bytes
// the trainer published (or a newer or older version the trainer published:
// a relay can still withhold versions; it cannot change or renumber one).
//
// Keys are PEM files as OpenSSL writes them:
//   openssl genpkey -algorithm ed25519 -out trainer-key.pem
//   openssl pkey -in trainer-key.pem -pubout -out trainer-pub.pem
//
// Threads: SigningKey and VerifyKey are immutable after loading and may be
// used from any thread at once; ChunkDigester belongs to one thread at a
// time. Errors: kInvalidConfig for an unreadable or wrong key file (the
// message names the file and says how to make one), kAuthFailed for a
// signature that does not verify or a statement about another version or
// layout, kChecksumMismatch for bytes that do not match the signed digests,
// kProtocolError for a block that does not decode, kInternal when OpenSSL
// fails (fail closed: never a pass).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/status.h"

struct evp_pkey_st;
struct evp_md_ctx_st;

namespace weightsync::detail {

using Sha256Digest = std::array<std::uint8_t, 32>;
using Ed25519Signature = std::array<std::uint8_t, 64>;

// The payload is digested in chunks of this many bytes (the last may be
// shorter): 32 bytes of digest per MiB in the block, and the unit a partial
// check could verify.
inline constexpr std::uint32_t kSignatureChunkBytes = 1u << 20;
// A block's chunk size must be a power of two in [64 KiB, 1 GiB].
inline constexpr std::uint32_t kMinSignatureChunkBytes = 64u << 10;
inline constexpr std::uint32_t kMaxSignatureChunkBytes = 1u << 30;

// An Ed25519 private key (the trainer's).
class SigningKey {
 public:
  // kInvalidConfig: no such file, not a PEM private key, not Ed25519.
  static Result<SigningKey> load_pem_file(const std::string& path);
  static Result<SigningKey> generate();
  // PKCS#8 PEM of the private key; SubjectPublicKeyInfo PEM of the public one.
  Result<std::string> private_pem() const;
  Result<std::string> public_pem() const;
  Result<Ed25519Signature> sign(const std::vector<std::uint8_t>& message) const;
  // SHA-256 of the raw 32-byte public key: names the key in blocks and errors.
  const Sha256Digest& key_id() const noexcept { return key_id_; }

 private:
  std::shared_ptr<evp_pkey_st> key_;
  Sha256Digest key_id_{};
};

// An Ed25519 public key (the trainer's, as its subscribers know it).
class VerifyKey {
 public:
  static Result<VerifyKey> load_pem_file(const std::string& path);
  static Result<VerifyKey> from_pem(const std::string& pem, const std::string& what);
  bool verify(const std::vector<std::uint8_t>& message, const Ed25519Signature& signature) const;
  const Sha256Digest& key_id() const noexcept { return key_id_; }

 private:
  std::shared_ptr<evp_pkey_st> key_;
  Sha256Digest key_id_{};
};

// SHA-256 digests of a byte stream in chunks of `chunk_bytes`.
class ChunkDigester {
 public:
  explicit ChunkDigester(std::uint32_t chunk_bytes = kSignatureChunkBytes);
  ~ChunkDigester();
  ChunkDigester(const ChunkDigester&) = delete;
  ChunkDigester& operator=(const ChunkDigester&) = delete;

  void update(const void* data, std::size_t bytes);
  // The digests of every chunk so far (the last one possibly short); resets.
  std::vector<Sha256Digest> finish();

 private:
  std::uint32_t chunk_bytes_;
  std::uint64_t in_chunk_ = 0;
  std::vector<Sha256Digest> digests_;
  evp_md_ctx_st* ctx_ = nullptr;
};

// What a signature says about one version, and the signature.
struct SignatureBlock {
  std::uint64_t version = 0;
  Sha256Digest layout_digest{};
  std::uint64_t payload_bytes = 0;
  std::uint32_t chunk_bytes = kSignatureChunkBytes;
  std::vector<Sha256Digest> chunks;
  Sha256Digest key_id{};
  Ed25519Signature signature{};

  std::vector<std::uint8_t> encode() const;
  // kProtocolError unless it is a well-formed block: a known format, a valid
  // chunk size, exactly ceil(payload_bytes / chunk_bytes) digests (at most
  // `max_chunks`), nothing after the signature.
  static Result<SignatureBlock> decode(const std::vector<std::uint8_t>& bytes, std::uint64_t max_chunks);
  // The exact bytes the signature covers.
  std::vector<std::uint8_t> statement() const;
};

// A run of payload bytes in memory; a payload is a list of them in order.
struct PayloadPiece {
  const void* data = nullptr;
  std::uint64_t bytes = 0;
};

// The chunk digests of the payload made of `pieces` (in order), computed by
// up to `threads` threads at once (chunks are independent; 0: as many as
// digest_threads() says). Same result as one ChunkDigester over the pieces.
std::vector<Sha256Digest> digest_pieces(const std::vector<PayloadPiece>& pieces,
                                        std::uint32_t chunk_bytes = kSignatureChunkBytes, unsigned threads = 0);
// Threads a digest uses by default: up to 4, at most the cores there are.
unsigned digest_threads();

// SHA-256 of the layout as it travels (WeightLayout::serialize()).
Sha256Digest layout_digest(const WeightLayout& layout);

// Digests of the payload of a version image: the layout's tensors in order.
std::vector<Sha256Digest> digest_payload(const WeightLayout& layout, const void* image,
                                         std::uint32_t chunk_bytes = kSignatureChunkBytes, unsigned threads = 0);

// Signs `version` with these chunk digests.
Result<SignatureBlock> sign_version(const SigningKey& key, std::uint64_t version, const Sha256Digest& layout,
                                    std::uint64_t payload_bytes, std::vector<Sha256Digest> chunks,
                                    std::uint32_t chunk_bytes = kSignatureChunkBytes);

// kAuthFailed unless `block` is signed by `key` and states `version`,
// `layout` and `payload_bytes`.
Status verify_statement(const VerifyKey& key, const SignatureBlock& block, std::uint64_t version,
                        const Sha256Digest& layout, std::uint64_t payload_bytes);
// kChecksumMismatch unless `received` (digests of what arrived) equals the
// signed ones; the message names the first chunk that differs.
Status check_chunks(const SignatureBlock& block, const std::vector<Sha256Digest>& received);

// The first 8 bytes of a digest in hex, for messages.
std::string short_hex(const Sha256Digest& digest);

}  // namespace weightsync::detail
