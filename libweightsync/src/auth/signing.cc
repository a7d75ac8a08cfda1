// Ed25519 version signatures: keys, chunk digests, the block and its checks.
#include "auth/signing.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <thread>
#include <fstream>
#include <sstream>

#include "common/byte_codec.h"

namespace weightsync::detail {
namespace {

constexpr std::uint32_t kBlockFormat = 1;
constexpr const char* kStatementDomain = "weightsync/1 version signature";
constexpr const char* kMakeKeys =
    " (make a key pair with: openssl genpkey -algorithm ed25519 -out trainer-key.pem && "
    "openssl pkey -in trainer-key.pem -pubout -out trainer-pub.pem)";

std::shared_ptr<evp_pkey_st> own(EVP_PKEY* key) {
  return std::shared_ptr<evp_pkey_st>(key, EVP_PKEY_free);
}

Status invalid_key(const std::string& what, const std::string& why) {
  return Status(ErrorCode::kInvalidConfig, what + ": " + why + kMakeKeys);
}

Result<std::string> read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_key(what + " '" + path + "'", "cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  if (s.size() > 64 * 1024) return invalid_key(what + " '" + path + "'", "is larger than a PEM key can be");
  return s;
}

Sha256Digest sha256(const void* data, std::size_t bytes) {
  Sha256Digest out{};
  unsigned int len = 0;
  if (EVP_Digest(data, bytes, out.data(), &len, EVP_sha256(), nullptr) != 1 || len != out.size()) {
    throw std::runtime_error("SHA-256 failed in OpenSSL");
  }
  return out;
}

Result<Sha256Digest> key_id_of(EVP_PKEY* key) {
  std::array<std::uint8_t, 32> raw{};
  std::size_t len = raw.size();
  if (EVP_PKEY_get_raw_public_key(key, raw.data(), &len) != 1 || len != raw.size()) {
    return Status(ErrorCode::kInternal, "could not read the Ed25519 public key");
  }
  return sha256(raw.data(), raw.size());
}

Result<std::string> pem_of(EVP_PKEY* key, bool private_key) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (!bio) return Status(ErrorCode::kInternal, "BIO_new failed");
  const int ok = private_key ? PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
                             : PEM_write_bio_PUBKEY(bio.get(), key);
  if (ok != 1) return Status(ErrorCode::kInternal, "could not write the key as PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

}  // namespace

// ---- keys ----

Result<SigningKey> SigningKey::load_pem_file(const std::string& path) {
  const std::string what = "the signing key";
  auto text = read_file(path, what);
  if (!text.ok()) return text.status();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())),
                                                BIO_free);
  EVP_PKEY* raw = bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (raw == nullptr) return invalid_key(what + " '" + path + "'", "is not a PEM private key");
  auto key = own(raw);
  if (EVP_PKEY_get_base_id(raw) != EVP_PKEY_ED25519) {
    return invalid_key(what + " '" + path + "'", "is not an Ed25519 key");
  }
  SigningKey out;
  auto id = key_id_of(raw);
  if (!id.ok()) return id.status();
  out.key_ = std::move(key);
  out.key_id_ = *id;
  return out;
}

Result<SigningKey> SigningKey::generate() {
  EVP_PKEY* raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (raw == nullptr) return Status(ErrorCode::kInternal, "could not generate an Ed25519 key");
  SigningKey out;
  out.key_ = own(raw);
  auto id = key_id_of(raw);
  if (!id.ok()) return id.status();
  out.key_id_ = *id;
  return out;
}

Result<std::string> SigningKey::private_pem() const {
  return pem_of(key_.get(), true);
}

Result<std::string> SigningKey::public_pem() const {
  return pem_of(key_.get(), false);
}

Result<Ed25519Signature> SigningKey::sign(const std::vector<std::uint8_t>& message) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  Ed25519Signature sig{};
  std::size_t len = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &len, message.data(), message.size()) != 1 || len != sig.size()) {
    return Status(ErrorCode::kInternal, "Ed25519 signing failed in OpenSSL");
  }
  return sig;
}

Result<VerifyKey> VerifyKey::from_pem(const std::string& pem, const std::string& what) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                BIO_free);
  EVP_PKEY* raw = bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (raw == nullptr) return invalid_key(what, "is not a PEM public key");
  auto key = own(raw);
  if (EVP_PKEY_get_base_id(raw) != EVP_PKEY_ED25519) return invalid_key(what, "is not an Ed25519 key");
  VerifyKey out;
  auto id = key_id_of(raw);
  if (!id.ok()) return id.status();
  out.key_ = std::move(key);
  out.key_id_ = *id;
  return out;
}

Result<VerifyKey> VerifyKey::load_pem_file(const std::string& path) {
  const std::string what = "the trainer's public key";
  auto text = read_file(path, what);
  if (!text.ok()) return text.status();
  return from_pem(*text, what + " '" + path + "'");
}

bool VerifyKey::verify(const std::vector<std::uint8_t>& message, const Ed25519Signature& signature) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  return ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), signature.data(), signature.size(), message.data(), message.size()) == 1;
}

// ---- chunk digests ----

ChunkDigester::ChunkDigester(std::uint32_t chunk_bytes) : chunk_bytes_(chunk_bytes), ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::runtime_error("SHA-256 could not be set up in OpenSSL");
  }
}

ChunkDigester::~ChunkDigester() {
  EVP_MD_CTX_free(ctx_);
}

void ChunkDigester::update(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (bytes > 0) {
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, chunk_bytes_ - in_chunk_));
    if (EVP_DigestUpdate(ctx_, p, take) != 1) throw std::runtime_error("SHA-256 failed in OpenSSL");
    p += take;
    bytes -= take;
    in_chunk_ += take;
    if (in_chunk_ == chunk_bytes_) {
      Sha256Digest d{};
      if (EVP_DigestFinal_ex(ctx_, d.data(), nullptr) != 1 || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
        throw std::runtime_error("SHA-256 failed in OpenSSL");
      }
      digests_.push_back(d);
      in_chunk_ = 0;
    }
  }
}

std::vector<Sha256Digest> ChunkDigester::finish() {
  if (in_chunk_ > 0) {
    Sha256Digest d{};
    if (EVP_DigestFinal_ex(ctx_, d.data(), nullptr) != 1 || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
      throw std::runtime_error("SHA-256 failed in OpenSSL");
    }
    digests_.push_back(d);
    in_chunk_ = 0;
  }
  return std::move(digests_);
}

// ---- the block ----

std::vector<std::uint8_t> SignatureBlock::statement() const {
  ByteWriter w;
  w.str16(kStatementDomain);
  w.u64(version);
  w.bytes(layout_digest.data(), layout_digest.size());
  w.u64(payload_bytes);
  w.u32(chunk_bytes);
  w.u32(static_cast<std::uint32_t>(chunks.size()));
  std::vector<std::uint8_t> all;
  all.reserve(chunks.size() * sizeof(Sha256Digest));
  for (const auto& c : chunks) all.insert(all.end(), c.begin(), c.end());
  const Sha256Digest root = sha256(all.data(), all.size());
  w.bytes(root.data(), root.size());
  return w.take();
}

std::vector<std::uint8_t> SignatureBlock::encode() const {
  ByteWriter w;
  w.reserve(128 + chunks.size() * 32);
  w.u32(kBlockFormat);
  w.u64(version);
  w.bytes(layout_digest.data(), layout_digest.size());
  w.u64(payload_bytes);
  w.u32(chunk_bytes);
  w.u32(static_cast<std::uint32_t>(chunks.size()));
  for (const auto& c : chunks) w.bytes(c.data(), c.size());
  w.bytes(key_id.data(), key_id.size());
  w.bytes(signature.data(), signature.size());
  return w.take();
}

Result<SignatureBlock> SignatureBlock::decode(const std::vector<std::uint8_t>& bytes, std::uint64_t max_chunks) {
  auto bad = [](const std::string& why) {
    return Status(ErrorCode::kProtocolError, "a signature block " + why);
  };
  ByteReader r(bytes.data(), bytes.size());
  std::uint32_t format = 0, count = 0;
  SignatureBlock b;
  if (!r.u32(&format) || !r.u64(&b.version) || !r.bytes(b.layout_digest.data(), 32) || !r.u64(&b.payload_bytes) ||
      !r.u32(&b.chunk_bytes) || !r.u32(&count)) {
    return bad("is cut short");
  }
  if (format != kBlockFormat) return bad("has format " + std::to_string(format) + " (this build reads 1)");
  if (b.chunk_bytes < kMinSignatureChunkBytes || b.chunk_bytes > kMaxSignatureChunkBytes ||
      (b.chunk_bytes & (b.chunk_bytes - 1)) != 0) {
    return bad("has a chunk size of " + std::to_string(b.chunk_bytes) + " bytes");
  }
  const std::uint64_t expected = b.payload_bytes / b.chunk_bytes + (b.payload_bytes % b.chunk_bytes != 0);
  if (count != expected || count > max_chunks) {
    return bad("lists " + std::to_string(count) + " chunk digests for " + std::to_string(b.payload_bytes) +
               " bytes (expected " + std::to_string(expected) + ", at most " + std::to_string(max_chunks) + ")");
  }
  if (r.remaining() != std::uint64_t{count} * 32 + 32 + 64) return bad("has the wrong length");
  b.chunks.resize(count);
  for (auto& c : b.chunks) r.bytes(c.data(), c.size());
  r.bytes(b.key_id.data(), b.key_id.size());
  r.bytes(b.signature.data(), b.signature.size());
  return b;
}

Sha256Digest layout_digest(const WeightLayout& layout) {
  ByteWriter w;
  w.str16("weightsync/1 layout");
  w.blob32(layout.serialize());
  const auto bytes = w.take();
  return sha256(bytes.data(), bytes.size());
}

unsigned digest_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::max(1u, std::min(4u, cores));
}

std::vector<Sha256Digest> digest_pieces(const std::vector<PayloadPiece>& pieces, std::uint32_t chunk_bytes,
                                        unsigned threads) {
  std::uint64_t total = 0;
  for (const auto& p : pieces) total += p.bytes;
  const std::uint64_t chunks = total / chunk_bytes + (total % chunk_bytes != 0);
  if (threads == 0) threads = digest_threads();
  threads = static_cast<unsigned>(std::min<std::uint64_t>(threads, chunks / 4 + 1));  // >= 4 chunks a thread
  if (threads <= 1) {
    ChunkDigester digester(chunk_bytes);
    for (const auto& p : pieces) digester.update(p.data, p.bytes);
    return digester.finish();
  }
  // Where each chunk starts: (piece, offset in it), found in one pass.
  std::vector<std::pair<std::size_t, std::uint64_t>> starts;
  starts.reserve(chunks);
  std::uint64_t before = 0;  // payload bytes before piece i
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    for (std::uint64_t at = starts.size() * std::uint64_t{chunk_bytes}; at < before + pieces[i].bytes;
         at += chunk_bytes) {
      starts.emplace_back(i, at - before);
    }
    before += pieces[i].bytes;
  }
  std::vector<Sha256Digest> out(chunks);
  auto work = [&](std::uint64_t first, std::uint64_t last) {  // chunks [first, last)
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx) throw std::runtime_error("SHA-256 could not be set up in OpenSSL");
    for (std::uint64_t c = first; c < last; ++c) {
      if (EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw std::runtime_error("SHA-256 failed");
      auto [piece, offset] = starts[c];
      std::uint64_t left = std::min<std::uint64_t>(chunk_bytes, total - c * std::uint64_t{chunk_bytes});
      while (left > 0) {
        const std::uint64_t take = std::min(left, pieces[piece].bytes - offset);
        if (EVP_DigestUpdate(ctx.get(), static_cast<const std::uint8_t*>(pieces[piece].data) + offset, take) != 1) {
          throw std::runtime_error("SHA-256 failed in OpenSSL");
        }
        left -= take;
        offset = 0;
        ++piece;
      }
      if (EVP_DigestFinal_ex(ctx.get(), out[c].data(), nullptr) != 1) throw std::runtime_error("SHA-256 failed");
    }
  };
  std::vector<std::thread> helpers;
  std::vector<std::exception_ptr> errors(threads);
  const std::uint64_t per = (chunks + threads - 1) / threads;
  for (unsigned t = 1; t < threads; ++t) {
    helpers.emplace_back([&, t] {
      try {
        work(std::min(chunks, t * per), std::min(chunks, (t + 1) * per));
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  try {
    work(0, std::min(chunks, per));
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& h : helpers) h.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

std::vector<Sha256Digest> digest_payload(const WeightLayout& layout, const void* image, std::uint32_t chunk_bytes,
                                         unsigned threads) {
  std::vector<PayloadPiece> pieces;
  pieces.reserve(layout.tensors().size());
  const auto* base = static_cast<const std::uint8_t*>(image);
  for (const auto& t : layout.tensors()) pieces.push_back({base + t.offset, t.bytes});
  return digest_pieces(pieces, chunk_bytes, threads);
}

Result<SignatureBlock> sign_version(const SigningKey& key, std::uint64_t version, const Sha256Digest& layout,
                                    std::uint64_t payload_bytes, std::vector<Sha256Digest> chunks,
                                    std::uint32_t chunk_bytes) {
  SignatureBlock b;
  b.version = version;
  b.layout_digest = layout;
  b.payload_bytes = payload_bytes;
  b.chunk_bytes = chunk_bytes;
  b.chunks = std::move(chunks);
  b.key_id = key.key_id();
  auto sig = key.sign(b.statement());
  if (!sig.ok()) return sig.status();
  b.signature = *sig;
  return b;
}

Status verify_statement(const VerifyKey& key, const SignatureBlock& block, std::uint64_t version,
                        const Sha256Digest& layout, std::uint64_t payload_bytes) {
  if (block.key_id != key.key_id()) {
    return Status(ErrorCode::kAuthFailed, "version " + std::to_string(version) + " is signed by key " +
                                              short_hex(block.key_id) + ", not by the trainer's key " +
                                              short_hex(key.key_id()) +
                                              " (WEIGHTSYNC_TRUSTED_KEY): refused");
  }
  if (!key.verify(block.statement(), block.signature)) {
    return Status(ErrorCode::kAuthFailed, "the signature served with version " + std::to_string(version) +
                                              " does not verify under the trainer's key: forged or changed "
                                              "after the trainer signed it; refused");
  }
  if (block.version != version) {
    return Status(ErrorCode::kAuthFailed, "the trainer's signature served with version " + std::to_string(version) +
                                              " is for version " + std::to_string(block.version) +
                                              " (a replayed signature): refused");
  }
  if (block.layout_digest != layout || block.payload_bytes != payload_bytes) {
    return Status(ErrorCode::kAuthFailed, "the trainer signed version " + std::to_string(version) +
                                              " for another layout than the one this publisher serves "
                                              "(tensors renamed, reshaped or moved on the way): refused");
  }
  return Status();
}

Status check_chunks(const SignatureBlock& block, const std::vector<Sha256Digest>& received) {
  if (received.size() != block.chunks.size()) {
    return Status(ErrorCode::kChecksumMismatch, "version " + std::to_string(block.version) + " arrived as " +
                                                    std::to_string(received.size()) + " chunks, the trainer signed " +
                                                    std::to_string(block.chunks.size()));
  }
  for (std::size_t i = 0; i < received.size(); ++i) {
    if (received[i] != block.chunks[i]) {
      return Status(ErrorCode::kChecksumMismatch,
                    "version " + std::to_string(block.version) + " does not match the trainer's signature at byte " +
                        std::to_string(i * std::uint64_t{block.chunk_bytes}) + " of its payload (chunk " +
                        std::to_string(i) + "): changed after the trainer published it, by a relay or on the way");
    }
  }
  return Status();
}

std::string short_hex(const Sha256Digest& digest) {
  char out[17];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 2 * i, 3, "%02x", digest[i]);
  return std::string(out, 16);
}

}  // namespace weightsync::detail
