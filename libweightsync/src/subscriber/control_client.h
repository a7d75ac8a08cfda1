// ControlClient: the subscriber's end of the control connection: one request,
// one reply (RELEASE has none), on the caller's thread, each bounded by a
// deadline. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "auth/integrity.h"
#include "net/socket.h"
#include "weightsync/layout.h"
#include "wire/messages.h"

namespace weightsync::detail {

class ControlClient {
 public:
  // Connects and authenticates within connect_timeout_ms.
  // integrity: ask for the integrity layer (auth/integrity.h); every frame
  // after the handshake is then sealed both ways. encryption (implies
  // integrity): every byte after WELCOME travels in AES-GCM records.
  static Result<ControlClient> connect(const HostPort& publisher, const std::string& secret,
                                       const std::string& client_name, int connect_timeout_ms,
                                       int io_timeout_ms, bool integrity = false, bool encryption = false);
  bool integrity() const noexcept { return seal_ != nullptr; }
  bool encrypted() const noexcept { return socket_.encrypted(); }

  std::uint64_t session_id() const noexcept { return session_id_; }

  // SELECT_STREAM: binds this session to the publisher's adapter `name`
  // (the first request of a session). Its ERROR comes back as that Status.
  Status select_stream(const std::string& name);
  Result<WeightLayout> get_layout();
  Result<SlotTableMsg> get_slot_table();
  // Latest version; waits up to wait_ms for one newer than `newer_than`.
  // streaming (only to a publisher that offers it): in-progress versions count.
  Result<std::uint64_t> query_version(std::uint64_t newer_than, std::uint32_t wait_ms, bool streaming = false);
  // kNotReady when nothing newer than `newer_than` is published. streaming:
  // may lease an in-progress version (odd stamp); otherwise such a lease is
  // a protocol error.
  Result<LeaseMsg> acquire(std::uint64_t newer_than, bool streaming = false);
  // ACQUIRE_VIEW: exactly `version` (exact) or the newest newer than it, with
  // the checksum of view `view_id` (0: the whole version's). Never streaming.
  Result<LeaseMsg> acquire_view(std::uint64_t version, bool exact, std::uint32_t view_id);
  // REGISTER_VIEW, in as many parts as the entries need: the view's id.
  Result<std::uint32_t> register_view(const std::vector<ViewEntry>& entries);
  // WAIT_WATERMARK: the lease's stream state once the watermark reaches
  // `bytes`, the version commits, or the publisher's bounded wait ends.
  Result<WatermarkMsg> wait_watermark(std::uint64_t lease_id, std::uint64_t bytes);
  Status release(std::uint64_t lease_id);
  // FETCH_DELTA: the chain's header, its compressed bytes into `bytes`.
  // ERROR(kNotReady) from the publisher: no delta (the connection stays). A
  // chain that does not start at `have`, ends before `at_least` or exceeds
  // `max_bytes` is a kProtocolError (the stream is then out of step).
  Result<DeltaMsg> fetch_delta(const FetchDeltaMsg& request, std::vector<std::uint8_t>& bytes);
  // FETCH_SIGNATURE: the publisher's signature block of `version`, as
  // served; its ERROR comes back as that Status (kNotReady: ask again).
  Result<std::vector<std::uint8_t>> fetch_signature(std::uint64_t version);
  // TRANSPORT_CONNECT: exchanges a transport's connection blobs.
  Result<std::vector<std::uint8_t>> transport_connect(const std::string& transport,
                                                      const std::vector<std::uint8_t>& blob);
  // False when the publisher has closed or reset the control connection.
  bool peer_alive() const;
  // True when the publisher has sent nothing unasked (no ERROR, no hang-up)
  // since the last reply: the connection is idle and alive.
  bool quiet() const;
  void bye();

 private:
  ControlClient(Socket socket, std::uint64_t session_id, int io_timeout_ms, std::unique_ptr<FrameSeal> seal)
      : socket_(std::move(socket)), session_id_(session_id), io_timeout_ms_(io_timeout_ms), seal_(std::move(seal)) {}
  Result<Frame> call(MsgType request, const std::vector<std::uint8_t>& payload, MsgType reply,
                     int extra_wait_ms = 0);

  Socket socket_;
  std::uint64_t session_id_ = 0;
  int io_timeout_ms_ = 10000;
  std::unique_ptr<FrameSeal> seal_;  // null without the integrity layer
};

}  // namespace weightsync::detail
