// The record layer of encrypted connections (net/record_layer.h): round trips
// through the socket functions, the records' layout, and every way a record
// changed in transit must fail: a flipped byte anywhere, a replay, a reorder,
// a dropped record, the wrong key, a plaintext peer, a cut-off record.
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "net/record_layer.h"
#include "net/socket.h"
#include "wire/frame_assembler.h"
#include "wire/frame_io.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {

constexpr const char* kPeer = "peer";

RecordKey key_of(std::uint8_t seed) {
  RecordKey k;
  for (std::size_t i = 0; i < k.key.size(); ++i) k.key[i] = static_cast<std::uint8_t>(seed + 3 * i);
  for (std::size_t i = 0; i < k.iv.size(); ++i) k.iv[i] = static_cast<std::uint8_t>(seed * 7 + i);
  return k;
}

struct Pair {
  Socket a, b;
};

// A connected stream pair (the functions under test treat it like TCP).
Pair socket_pair() {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  int size = 8 << 20;
  for (int fd : fds) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  return Pair{Socket(fds[0]), Socket(fds[1])};
}

std::unique_ptr<RecordLayer> layer(const RecordKey& send, const RecordKey& receive) {
  auto r = RecordLayer::create(send, receive);
  REQUIRE(r.ok());
  return std::move(*r);
}

// Both ends encrypted, a -> b with key 1, b -> a with key 2.
Pair encrypted_pair() {
  Pair p = socket_pair();
  p.a.enable_records(layer(key_of(1), key_of(2)));
  p.b.enable_records(layer(key_of(2), key_of(1)));
  return p;
}

std::vector<std::uint8_t> random_bytes_of(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// The raw records that `plain` becomes under key 1 (read by a plain socket).
std::vector<std::uint8_t> records_of(const std::vector<std::uint8_t>& plain) {
  Pair p = socket_pair();
  p.a.enable_records(layer(key_of(1), key_of(2)));
  REQUIRE(send_all(p.a, plain.data(), plain.size(), Deadline::after(std::chrono::seconds(5)), kPeer).ok());
  p.a.shutdown_both();
  std::vector<std::uint8_t> raw;
  std::uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::recv(p.b.fd(), buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.insert(raw.end(), buf, buf + n);
  }
  return raw;
}

// Feeds raw bytes to a receiver with key 1 and reads `bytes` plaintext.
Status receive_raw(const std::vector<std::uint8_t>& raw, std::size_t bytes, std::vector<std::uint8_t>* out = nullptr,
                   const RecordKey& key = key_of(1)) {
  Pair p = socket_pair();
  p.b.enable_records(layer(key_of(2), key));
  REQUIRE(::send(p.a.fd(), raw.data(), raw.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(raw.size()));
  p.a.shutdown_both();
  std::vector<std::uint8_t> plain(bytes);
  Status s = recv_all(p.b, plain.data(), plain.size(), Deadline::after(std::chrono::seconds(5)), kPeer);
  if (out != nullptr) *out = std::move(plain);
  return s;
}

}  // namespace

TEST_CASE("records: sizes around the record boundary round-trip bit-exact through send_iov and recv_iov",
          "[records]") {
  const std::size_t size = GENERATE(as<std::size_t>{}, 1, 100, 16383, 16384, 16385, 3 * 16384, (3u << 20) + 7);
  INFO("bytes " << size);
  Pair p = encrypted_pair();
  const auto data = random_bytes_of(size, static_cast<std::uint32_t>(size));
  // Sent in three uneven pieces, received in two other ones.
  const std::size_t cut1 = size / 3, cut2 = size - size / 5;
  iovec out[3] = {{const_cast<std::uint8_t*>(data.data()), cut1},
                  {const_cast<std::uint8_t*>(data.data()) + cut1, cut2 - cut1},
                  {const_cast<std::uint8_t*>(data.data()) + cut2, size - cut2}};
  std::vector<std::uint8_t> got(size);
  const std::size_t split = size / 2 + 1;
  iovec in[2] = {{got.data(), split}, {got.data() + split, size - split}};
  std::size_t streamed = 0;
  std::thread sender([&] {
    CHECK(send_iov(p.a, out, 3, Deadline::after(std::chrono::seconds(10)), kPeer).ok());
  });
  Status s = recv_iov(p.b, in, 2, 10000, kPeer, [&](const void*, std::size_t n) { streamed += n; });
  sender.join();
  REQUIRE(s.ok());
  CHECK(got == data);
  CHECK(streamed == size);
  CHECK(p.a.records()->records_sent() == (size + kMaxRecordPlaintext - 1) / kMaxRecordPlaintext);
  CHECK(p.b.records()->records_received() == p.a.records()->records_sent());
  CHECK_FALSE(p.b.has_pending_input());
}

TEST_CASE("records: the bytes on the wire are TLS 1.3 application-data records and hide the plaintext",
          "[records]") {
  std::vector<std::uint8_t> plain(40000);
  for (std::size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<std::uint8_t>("weights!"[i % 8]);
  const auto raw = records_of(plain);
  // 40000 bytes: records of 16384, 16384 and 7232 bytes, each with a 5-byte
  // header, the content-type byte and a 16-byte tag.
  REQUIRE(raw.size() == plain.size() + 3 * (kRecordHeaderBytes + 1 + kRecordTagBytes));
  std::size_t at = 0;
  for (std::size_t want : {16384u, 16384u, 7232u}) {
    REQUIRE(at + kRecordHeaderBytes <= raw.size());
    CHECK(raw[at] == 0x17);
    CHECK(raw[at + 1] == 0x03);
    CHECK(raw[at + 2] == 0x03);
    const std::size_t body = (std::size_t{raw[at + 3]} << 8) | raw[at + 4];
    CHECK(body == want + 1 + kRecordTagBytes);
    at += kRecordHeaderBytes + body;
  }
  CHECK(at == raw.size());
  const std::string text(raw.begin(), raw.end());
  CHECK(text.find("weights!") == std::string::npos);
  // Decrypting the first record with AES-128-GCM straight from OpenSSL, by
  // the layout's definition (nonce = iv XOR sequence 0, header as AAD).
  const RecordKey k = key_of(1);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  std::vector<std::uint8_t> out(16384 + 1 + 32);
  int len = 0, fin = 0;
  REQUIRE(EVP_DecryptInit_ex(ctx, EVP_aes_128_gcm(), nullptr, k.key.data(), k.iv.data()) == 1);
  REQUIRE(EVP_DecryptUpdate(ctx, nullptr, &len, raw.data(), 5) == 1);
  REQUIRE(EVP_DecryptUpdate(ctx, out.data(), &len, raw.data() + 5, 16384 + 1) == 1);
  REQUIRE(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, const_cast<std::uint8_t*>(raw.data() + 5 + 16385)) == 1);
  CHECK(EVP_DecryptFinal_ex(ctx, out.data() + len, &fin) == 1);
  EVP_CIPHER_CTX_free(ctx);
  CHECK(std::memcmp(out.data(), plain.data(), 16384) == 0);
  CHECK(out[16384] == 0x17);
}

TEST_CASE("records: a flipped bit anywhere in any record fails, and nothing after it is delivered",
          "[records]") {
  const auto plain = random_bytes_of(20000, 9);  // two records
  const auto raw = records_of(plain);
  REQUIRE(receive_raw(raw, plain.size()).ok());
  int refused = 0;
  for (std::size_t i = 0; i < raw.size(); i += (i < 64 || i + 64 > raw.size() ? 1 : 37)) {
    auto bad = raw;
    bad[i] ^= static_cast<std::uint8_t>(1u << (i % 8));
    std::vector<std::uint8_t> got;
    Status s = receive_raw(bad, plain.size(), &got);
    INFO("byte " << i << ": " << s.to_string());
    REQUIRE_FALSE(s.ok());
    // A changed length makes the record longer or shorter than the stream:
    // refused as malformed, or cut off at EOF; anything else fails its tag.
    if (s.code() == ErrorCode::kProtocolError) ++refused;
    CHECK((s.code() == ErrorCode::kProtocolError || s.code() == ErrorCode::kConnectionLost));
  }
  CHECK(refused > 100);
}

// Issue 30, finding 10: a record that fit the caller's buffer was decrypted
// straight into it before its tag was checked, so an on-path attacker's
// chosen bit flip landed in the destination (the engine's live parameters)
// before the pull failed. Now no byte of a record reaches the caller before
// its tag verifies.
TEST_CASE("records: a forged record releases no plaintext into the destination, not even flipped bits",
          "[records][finding10]") {
  const auto plain = random_bytes_of(20000, 11);  // two records: 16384 + 3616 bytes
  const auto raw = records_of(plain);
  const std::size_t first_body = kRecordHeaderBytes;                   // record 1's ciphertext
  const std::size_t second_body = kRecordHeaderBytes + 16384 + 1 + kRecordTagBytes + kRecordHeaderBytes;
  for (std::size_t flipped : {first_body + 100, second_body + 100}) {
    auto bad = raw;
    bad[flipped] ^= 0x40;  // the attacker's chosen change to one plaintext byte
    std::vector<std::uint8_t> got;
    Status s = receive_raw(bad, plain.size(), &got);
    INFO("flipped raw byte " << flipped << ": " << s.to_string());
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == ErrorCode::kProtocolError);
    const std::size_t record_start = flipped < second_body ? 0 : 16384;
    std::size_t released = 0;  // bytes of the forged record that reached the destination
    for (std::size_t i = record_start; i < plain.size(); ++i) released += got[i] != 0;
    CHECK(released == 0);
    // The records before the forged one were whole and genuine: delivered.
    CHECK(std::equal(plain.begin(), plain.begin() + record_start, got.begin()));
  }
}

TEST_CASE("records: a replayed, reordered or dropped record fails", "[records]") {
  const auto plain = random_bytes_of(3 * 16384, 4);  // three full records
  const auto raw = records_of(plain);
  const std::size_t rec = kRecordHeaderBytes + 16384 + 1 + kRecordTagBytes;
  REQUIRE(raw.size() == 3 * rec);
  auto piece = [&](int i) { return std::vector<std::uint8_t>(raw.begin() + i * rec, raw.begin() + (i + 1) * rec); };
  auto join = [](std::initializer_list<std::vector<std::uint8_t>> parts) {
    std::vector<std::uint8_t> v;
    for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
    return v;
  };
  SECTION("replayed") {
    CHECK(receive_raw(join({piece(0), piece(0), piece(1)}), plain.size()).code() == ErrorCode::kProtocolError);
  }
  SECTION("reordered") {
    CHECK(receive_raw(join({piece(1), piece(0), piece(2)}), plain.size()).code() == ErrorCode::kProtocolError);
  }
  SECTION("dropped") {
    CHECK(receive_raw(join({piece(0), piece(2)}), 2 * 16384).code() == ErrorCode::kProtocolError);
  }
  SECTION("under another key (another connection or another secret)") {
    CHECK(receive_raw(raw, plain.size(), nullptr, key_of(3)).code() == ErrorCode::kProtocolError);
  }
  SECTION("cut off mid-record") {
    const auto cut = std::vector<std::uint8_t>(raw.begin(), raw.begin() + rec + 100);
    CHECK(receive_raw(cut, plain.size()).code() == ErrorCode::kConnectionLost);
  }
  SECTION("intact, for contrast") {
    std::vector<std::uint8_t> got;
    REQUIRE(receive_raw(raw, plain.size(), &got).ok());
    CHECK(got == plain);
  }
}

TEST_CASE("records: a peer sending plaintext is refused with a message that names the setting", "[records]") {
  Pair p = socket_pair();
  p.b.enable_records(layer(key_of(2), key_of(1)));
  REQUIRE(write_frame(p.a, MsgType::kGetLayout, {}, Deadline::after(std::chrono::seconds(1)), kPeer).ok());
  auto frame = read_frame(p.b, 1024, Deadline::after(std::chrono::seconds(1)), Deadline::after(std::chrono::seconds(1)),
                          kPeer);
  REQUIRE_FALSE(frame.ok());
  CHECK(frame.status().code() == ErrorCode::kProtocolError);
  CHECK_THAT(frame.status().message(), Catch::Contains("WEIGHTSYNC_ENCRYPTION"));
}

TEST_CASE("records: two frames in one record: the event loop's assembler sees the second as pending input",
          "[records]") {
  Pair p = encrypted_pair();
  // Both frames in one send: one record holds both.
  std::vector<std::uint8_t> both;
  for (MsgType type : {MsgType::kGetLayout, MsgType::kGetSlotTable}) {
    std::uint8_t header[kFrameHeaderBytes];
    encode_header(type, 0, header);
    both.insert(both.end(), header, header + kFrameHeaderBytes);
  }
  REQUIRE(send_all(p.a, both.data(), both.size(), Deadline::after(std::chrono::seconds(1)), kPeer).ok());
  REQUIRE(p.a.records()->records_sent() == 1);
  REQUIRE(wait_readable(p.b, Deadline::after(std::chrono::seconds(1)), kPeer).ok());
  FrameAssembler in;
  auto first = in.read_from(p.b, 1024, kPeer);
  REQUIRE(first.ok());
  REQUIRE(*first == FrameAssembler::Progress::kFrame);
  CHECK(in.take_frame().type == MsgType::kGetLayout);
  // Nothing more is on the socket itself, but the record's rest is pending.
  CHECK(p.b.has_pending_input());
  CHECK(wait_readable(p.b, Deadline::after(std::chrono::milliseconds(0)), kPeer).ok());
  auto second = in.read_from(p.b, 1024, kPeer);
  REQUIRE(second.ok());
  REQUIRE(*second == FrameAssembler::Progress::kFrame);
  CHECK(in.take_frame().type == MsgType::kGetSlotTable);
  CHECK_FALSE(p.b.has_pending_input());
}

namespace {

// One record built here from the layout's definition with OpenSSL directly:
// `plain`, the inner content type, then `padding` zero bytes (TLS 1.3 allows
// a sender to pad; weightsync's never does, but must accept it).
std::vector<std::uint8_t> hand_made_record(const std::vector<std::uint8_t>& plain, std::uint8_t type,
                                           std::size_t padding, std::uint64_t sequence) {
  const RecordKey k = key_of(1);
  std::vector<std::uint8_t> inner = plain;
  inner.push_back(type);
  inner.insert(inner.end(), padding, 0);
  const std::size_t body = inner.size() + 16;
  std::vector<std::uint8_t> rec = {0x17, 0x03, 0x03, static_cast<std::uint8_t>(body >> 8),
                                   static_cast<std::uint8_t>(body)};
  std::uint8_t nonce[12];
  std::memcpy(nonce, k.iv.data(), 12);
  for (int i = 0; i < 8; ++i) nonce[11 - i] ^= static_cast<std::uint8_t>(sequence >> (8 * i));
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  std::vector<std::uint8_t> cipher(inner.size() + 16);
  REQUIRE(EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), nullptr, k.key.data(), nonce) == 1);
  REQUIRE(EVP_EncryptUpdate(ctx, nullptr, &len, rec.data(), 5) == 1);
  REQUIRE(EVP_EncryptUpdate(ctx, cipher.data(), &len, inner.data(), static_cast<int>(inner.size())) == 1);
  REQUIRE(EVP_EncryptFinal_ex(ctx, cipher.data() + len, &len) == 1);
  REQUIRE(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, cipher.data() + inner.size()) == 1);
  EVP_CIPHER_CTX_free(ctx);
  rec.insert(rec.end(), cipher.begin(), cipher.end());
  return rec;
}

}  // namespace

TEST_CASE("records: records made by an independent encoder are read, padded or not, into small and large buffers",
          "[records]") {
  const auto a = random_bytes_of(3000, 21), b = random_bytes_of(16384, 22);
  std::vector<std::uint8_t> raw = hand_made_record(a, 0x17, 0, 0);
  const auto second = hand_made_record(b, 0x17, 200, 1);  // padded
  raw.insert(raw.end(), second.begin(), second.end());
  std::vector<std::uint8_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  SECTION("one large read: each record decrypted straight into the caller's buffer") {
    std::vector<std::uint8_t> got;
    REQUIRE(receive_raw(raw, both.size(), &got).ok());
    CHECK(got == both);
  }
  SECTION("small reads: through the record layer's own buffer") {
    Pair p = socket_pair();
    p.b.enable_records(layer(key_of(2), key_of(1)));
    REQUIRE(::send(p.a.fd(), raw.data(), raw.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(raw.size()));
    std::vector<std::uint8_t> got(both.size());
    for (std::size_t at = 0; at < got.size(); at += 1000) {
      const std::size_t n = std::min<std::size_t>(1000, got.size() - at);
      REQUIRE(recv_all(p.b, got.data() + at, n, Deadline::after(std::chrono::seconds(2)), kPeer).ok());
    }
    CHECK(got == both);
  }
  SECTION("another inner content type (a TLS alert or handshake) is refused") {
    CHECK(receive_raw(hand_made_record(a, 0x15, 0, 0), a.size()).code() == ErrorCode::kProtocolError);
  }
}
