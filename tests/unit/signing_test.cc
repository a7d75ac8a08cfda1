// Version signatures (auth/signing.h): keys from PEM files, chunk digests,
// the block's encoding and every way a block or the bytes can be wrong: a
// forged signature, another key, a replay onto another version, another
// layout, changed bytes, a block cut short or padded, a bad chunk size.
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "auth/signing.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  std::string path = "/tmp/ws-signing-test-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

SigningKey fresh_key() {
  auto key = SigningKey::generate();
  REQUIRE(key.ok());
  return std::move(*key);
}

VerifyKey public_of(const SigningKey& key) {
  auto pem = key.public_pem();
  REQUIRE(pem.ok());
  auto verify = VerifyKey::from_pem(*pem, "test key");
  REQUIRE(verify.ok());
  return std::move(*verify);
}

WeightLayout small_layout() {
  auto layout = WeightLayout::build({{"a", DType::kFloat32, {1000, 300}}, {"b", DType::kUInt8, {70000}}});
  REQUIRE(layout.ok());
  return std::move(*layout);
}

std::vector<std::uint8_t> image_of(const WeightLayout& layout, std::uint32_t seed) {
  std::vector<std::uint8_t> image(layout.total_bytes());
  std::mt19937 rng(seed);
  for (auto& b : image) b = static_cast<std::uint8_t>(rng());
  return image;
}

}  // namespace

TEST_CASE("signing: keys load from the PEM files openssl writes, and a wrong file says how to make one",
          "[signing]") {
  SigningKey key = fresh_key();
  auto private_pem = key.private_pem();
  auto public_pem = key.public_pem();
  REQUIRE(private_pem.ok());
  REQUIRE(public_pem.ok());
  const std::string private_path = temp_file("key.pem", *private_pem);
  const std::string public_path = temp_file("pub.pem", *public_pem);
  auto loaded = SigningKey::load_pem_file(private_path);
  REQUIRE(loaded.ok());
  auto verify = VerifyKey::load_pem_file(public_path);
  REQUIRE(verify.ok());
  CHECK(loaded->key_id() == key.key_id());
  CHECK(verify->key_id() == key.key_id());
  auto sig = loaded->sign({1, 2, 3});
  REQUIRE(sig.ok());
  CHECK(verify->verify({1, 2, 3}, *sig));
  CHECK_FALSE(verify->verify({1, 2, 4}, *sig));

  auto missing = VerifyKey::load_pem_file("/nonexistent/trainer-pub.pem");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(missing.status().message(), Catch::Contains("/nonexistent/trainer-pub.pem") &&
                                             Catch::Contains("openssl genpkey -algorithm ed25519"));
  // The public key where the private one belongs, and the reverse.
  CHECK(SigningKey::load_pem_file(public_path).status().code() == ErrorCode::kInvalidConfig);
  CHECK(VerifyKey::load_pem_file(private_path).status().code() == ErrorCode::kInvalidConfig);
  // A key of another algorithm.
  EVP_PKEY* ec = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  REQUIRE(ec != nullptr);
  BIO* bio = BIO_new(BIO_s_mem());
  REQUIRE(PEM_write_bio_PUBKEY(bio, ec) == 1);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  const std::string ec_path = temp_file("ec.pem", std::string(data, static_cast<std::size_t>(n)));
  BIO_free(bio);
  EVP_PKEY_free(ec);
  auto not_ed = VerifyKey::load_pem_file(ec_path);
  REQUIRE_FALSE(not_ed.ok());
  CHECK_THAT(not_ed.status().message(), Catch::Contains("not an Ed25519 key"));
  for (const auto& p : {private_path, public_path, ec_path}) std::remove(p.c_str());
}

TEST_CASE("signing: chunk digests do not depend on how the stream is split", "[signing]") {
  std::vector<std::uint8_t> bytes(3 * kMinSignatureChunkBytes + 12345);
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  ChunkDigester whole(kMinSignatureChunkBytes);
  whole.update(bytes.data(), bytes.size());
  const auto expected = whole.finish();
  CHECK(expected.size() == 4);
  ChunkDigester pieces(kMinSignatureChunkBytes);
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t n = std::min<std::size_t>(bytes.size() - at, 1 + rng() % 100000);
    pieces.update(bytes.data() + at, n);
    at += n;
  }
  CHECK(pieces.finish() == expected);
  // Chunks digested by several threads at once, from pieces cut anywhere
  // (empty ones too), give the same digests.
  std::vector<PayloadPiece> cut;
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t n = std::min<std::size_t>(bytes.size() - at, rng() % 3 == 0 ? 0 : 1 + rng() % 70000);
    cut.push_back({bytes.data() + at, n});
    at += n;
  }
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    INFO(threads << " threads");
    CHECK(digest_pieces(cut, kMinSignatureChunkBytes, threads) == expected);
  }
  std::vector<std::uint8_t> many(40 * kMinSignatureChunkBytes + 1);  // enough chunks for 8 threads
  for (auto& b : many) b = static_cast<std::uint8_t>(rng());
  ChunkDigester one(kMinSignatureChunkBytes);
  one.update(many.data(), many.size());
  CHECK(digest_pieces({{many.data(), 1000}, {many.data() + 1000, many.size() - 1000}}, kMinSignatureChunkBytes, 8) ==
        one.finish());
  // Each digest is SHA-256 of its chunk.
  std::array<std::uint8_t, 32> first{};
  unsigned int len = 0;
  REQUIRE(EVP_Digest(bytes.data(), kMinSignatureChunkBytes, first.data(), &len, EVP_sha256(), nullptr) == 1);
  CHECK(first == expected[0]);
}

TEST_CASE("signing: a signed version verifies, and a forged, foreign, replayed or re-laid-out one does not",
          "[signing]") {
  SigningKey trainer = fresh_key();
  const VerifyKey trusted = public_of(trainer);
  const WeightLayout layout = small_layout();
  const Sha256Digest layout_sha = layout_digest(layout);
  auto image = image_of(layout, 1);
  auto block = sign_version(trainer, 7, layout_sha, layout.payload_bytes(), digest_payload(layout, image.data()));
  REQUIRE(block.ok());
  auto decoded = SignatureBlock::decode(block->encode(), 1000);
  REQUIRE(decoded.ok());
  CHECK(verify_statement(trusted, *decoded, 7, layout_sha, layout.payload_bytes()).ok());
  CHECK(check_chunks(*decoded, digest_payload(layout, image.data())).ok());

  SECTION("a flipped bit of the signature") {
    decoded->signature[5] ^= 1;
    Status s = verify_statement(trusted, *decoded, 7, layout_sha, layout.payload_bytes());
    CHECK(s.code() == ErrorCode::kAuthFailed);
    CHECK_THAT(s.message(), Catch::Contains("does not verify"));
  }
  SECTION("a digest changed to match changed bytes: the signature no longer covers it") {
    image[100] ^= 0x80;
    decoded->chunks = digest_payload(layout, image.data());
    CHECK(verify_statement(trusted, *decoded, 7, layout_sha, layout.payload_bytes()).code() == ErrorCode::kAuthFailed);
  }
  SECTION("signed by another key, even one naming the trainer's key id") {
    SigningKey other = fresh_key();
    auto forged = sign_version(other, 7, layout_sha, layout.payload_bytes(), digest_payload(layout, image.data()));
    REQUIRE(forged.ok());
    Status s = verify_statement(trusted, *forged, 7, layout_sha, layout.payload_bytes());
    CHECK(s.code() == ErrorCode::kAuthFailed);
    CHECK_THAT(s.message(), Catch::Contains("not by the trainer's key"));
    forged->key_id = trainer.key_id();
    CHECK(verify_statement(trusted, *forged, 7, layout_sha, layout.payload_bytes()).code() == ErrorCode::kAuthFailed);
  }
  SECTION("replayed onto another version") {
    Status s = verify_statement(trusted, *decoded, 8, layout_sha, layout.payload_bytes());
    CHECK(s.code() == ErrorCode::kAuthFailed);
    CHECK_THAT(s.message(), Catch::Contains("replayed"));
  }
  SECTION("another layout") {
    auto other = WeightLayout::build({{"a", DType::kFloat32, {300, 1000}}, {"b", DType::kUInt8, {70000}}});
    REQUIRE(other.ok());
    CHECK(layout_digest(*other) != layout_sha);
    CHECK(verify_statement(trusted, *decoded, 7, layout_digest(*other), layout.payload_bytes()).code() ==
          ErrorCode::kAuthFailed);
  }
  SECTION("one changed byte in the second chunk") {
    image[layout.tensors()[0].offset + kSignatureChunkBytes + 3] ^= 1;
    Status s = check_chunks(*decoded, digest_payload(layout, image.data()));
    CHECK(s.code() == ErrorCode::kChecksumMismatch);
    CHECK_THAT(s.message(), Catch::Contains("chunk 1"));
  }
}

TEST_CASE("signing: a block that is cut short, padded, or lists the wrong number of digests does not decode",
          "[signing]") {
  SigningKey trainer = fresh_key();
  const WeightLayout layout = small_layout();
  auto image = image_of(layout, 2);
  auto block = sign_version(trainer, 3, layout_digest(layout), layout.payload_bytes(),
                            digest_payload(layout, image.data()));
  REQUIRE(block.ok());
  const auto bytes = block->encode();
  REQUIRE(SignatureBlock::decode(bytes, 100).ok());
  for (std::size_t cut = 0; cut < bytes.size(); cut += 7) {
    auto shorter = bytes;
    shorter.resize(cut);
    CHECK(SignatureBlock::decode(shorter, 100).status().code() == ErrorCode::kProtocolError);
  }
  auto longer = bytes;
  longer.push_back(0);
  CHECK(SignatureBlock::decode(longer, 100).status().code() == ErrorCode::kProtocolError);
  // More chunks than the reader allows (a hostile relay's 4 GiB claim).
  CHECK(SignatureBlock::decode(bytes, 1).status().code() == ErrorCode::kProtocolError);
  SignatureBlock wrong = *block;
  wrong.chunks.pop_back();
  CHECK(SignatureBlock::decode(wrong.encode(), 100).status().code() == ErrorCode::kProtocolError);
  wrong = *block;
  wrong.chunk_bytes = 1000;  // not a power of two
  CHECK(SignatureBlock::decode(wrong.encode(), 100).status().code() == ErrorCode::kProtocolError);
}
