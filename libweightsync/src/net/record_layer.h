// RecordLayer: the optional encryption of a TCP connection (docs/security.md,
// "Encryption"; docs/protocol.md, "Encrypted connections"). Once a Socket has
// one (Socket::enable_records), every byte the socket functions send or
// receive travels in AES-128-GCM records laid out as TLS 1.3 application-data
// records (RFC 8446, 5.2):
//
//   0x17 0x03 0x03 | length (u16 BE) | AES-128-GCM(plaintext | 0x17) | tag (16)
//
// with the 5-byte header as the additional data and the nonce = iv XOR the
// record's 64-bit sequence number (big-endian, right-aligned), each direction
// with its own key, iv and sequence. A record carries at most 16 KiB of
// plaintext. So bytes cannot be read, changed, dropped, replayed, reordered
// or spliced between connections without the next record failing.
//
// Receive side: reads raw bytes only up to the end of the record it is
// assembling (never past it), decrypts it into its own buffer, and releases
// its plaintext to the caller only after the tag verified (so a forged
// record changes no byte of the caller's destination); keeps the unread
// plaintext;
// has_pending() says when some is waiting (the publisher's event loop then
// serves the connection without waiting for epoll).
//
// Threads: one owner at a time, like its Socket. Errors: kProtocolError for
// a record that is not one (a peer without encryption) or fails its tag
// (changed in transit); kConnectionLost on EOF or a reset; kInternal when
// OpenSSL fails (fails closed).
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "weightsync/status.h"

namespace weightsync::detail {

inline constexpr std::size_t kRecordHeaderBytes = 5;
inline constexpr std::size_t kRecordTagBytes = 16;
inline constexpr std::size_t kMaxRecordPlaintext = 16384;
// TLS 1.3's bound on a record's body: plaintext + content type + tag + padding.
inline constexpr std::size_t kMaxRecordBody = kMaxRecordPlaintext + 256;

struct RecordKey {
  std::array<std::uint8_t, 16> key{};
  std::array<std::uint8_t, 12> iv{};
};

class RecordLayer {
 public:
  // kInternal when OpenSSL cannot set up AES-128-GCM.
  static Result<std::unique_ptr<RecordLayer>> create(const RecordKey& send, const RecordKey& receive);
  ~RecordLayer();
  RecordLayer(const RecordLayer&) = delete;
  RecordLayer& operator=(const RecordLayer&) = delete;

  // Encrypts the next `bytes` bytes of iov[0..count) (which must hold that
  // many) into whole records appended to `out`.
  Status seal(const iovec* iov, std::size_t count, std::size_t bytes, std::vector<std::uint8_t>& out);

  // Reads without blocking: copies up to `bytes` of plaintext into `out` and
  // returns how many (0: the socket has nothing more for now).
  Result<std::size_t> read_some(int fd, void* out, std::size_t bytes, const char* peer);
  // True while plaintext of a received record waits to be read.
  bool has_pending() const noexcept { return plain_used_ < plain_size_; }

  // Records this side sent and received (the sequence numbers).
  std::uint64_t records_sent() const noexcept { return send_seq_; }
  std::uint64_t records_received() const noexcept { return receive_seq_; }

 private:
  RecordLayer() = default;
  // Decrypts the record in raw_ into plain_ and checks its tag; plain_ is
  // read out only after that (kProtocolError: nothing is left to read).
  Status open_record(const char* peer);

  struct CipherContexts;
  std::unique_ptr<CipherContexts> ctx_;
  RecordKey send_{};
  RecordKey receive_{};
  std::uint64_t send_seq_ = 0;
  std::uint64_t receive_seq_ = 0;
  std::vector<std::uint8_t> raw_;  // the record being assembled
  std::size_t raw_filled_ = 0;
  std::vector<std::uint8_t> plain_;  // its plaintext: the first plain_size_ bytes
  std::size_t plain_size_ = 0;
  std::size_t plain_used_ = 0;
};

}  // namespace weightsync::detail
