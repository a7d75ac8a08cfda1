// The trainer's signatures: fetched from the publisher and checked against
// the bytes of each whole version pulled (auth/signing.h).
#include "subscriber/subscriber_impl.h"

#include <algorithm>
#include <thread>

#include "auth/signing.h"
#include "common/log.h"

namespace weightsync {

Result<std::vector<std::uint8_t>> Subscriber::Impl::fetch_signature(std::uint64_t version) {
  if (!signatures_offered) {  // never sent: a publisher before signatures would close the connection
    return Status(
        ErrorCode::kInvalidConfig,
        "this publisher serves no signatures (its trainer runs without WEIGHTSYNC_SIGNING_KEY, or it "
        "predates signatures)");
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(io_timeout_ms);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    auto block = note(control.fetch_signature(version));
    if (block.ok() || block.status().code() != ErrorCode::kNotReady) return block;
    if (std::chrono::steady_clock::now() + pause >= end) {
      return Status(ErrorCode::kTimeout, "the publisher had no signature for version " +
                                             std::to_string(version) + " within " +
                                             std::to_string(io_timeout_ms) +
                                             " ms (is the trainer's signer keeping up? see its "
                                             "PublisherStats::versions_unsigned)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

Status Subscriber::Impl::check_signature(const PullPlan::State& plan, std::uint64_t version) {
  auto bytes = fetch_signature(version);
  if (!bytes.ok()) {
    if (bytes.status().code() != ErrorCode::kInvalidConfig) return bytes.status();
    return Status(ErrorCode::kAuthFailed,
                  "version " + std::to_string(version) + " came without the trainer's signature (" +
                      bytes.status().message() +
                      "); this subscriber accepts only signed versions (WEIGHTSYNC_TRUSTED_KEY): start the "
                      "trainer with WEIGHTSYNC_SIGNING_KEY, through relays of this release or later");
  }
  auto block =
      detail::SignatureBlock::decode(*bytes, layout.payload_bytes() / detail::kMinSignatureChunkBytes + 1);
  if (!block.ok()) {
    return Status(ErrorCode::kAuthFailed, "version " + std::to_string(version) + " came with " +
                                              block.status().message() + ": refused");
  }
  if (Status s = detail::verify_statement(*trusted_key, *block, version, layout_sha, layout.payload_bytes());
      !s.ok()) {
    return s;
  }
  std::vector<detail::PayloadPiece> payload;  // the plan is in layout order
  payload.reserve(plan.pieces.size());
  for (const auto& piece : plan.pieces) payload.push_back({piece.dest, piece.length});
  return detail::check_chunks(*block, detail::digest_pieces(payload, block->chunk_bytes));
}

Status Subscriber::Impl::verify_signature(const PullPlan::State& plan, std::uint64_t version) {
  const auto start = std::chrono::steady_clock::now();
  Status s = check_signature(plan, version);
  stats.verify_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s.ok()) {
    ++stats.signatures_verified;
  } else if (s.code() == ErrorCode::kAuthFailed || s.code() == ErrorCode::kChecksumMismatch) {
    ++stats.signatures_refused;
    if (version != last_refused_version) WS_WARN("subscriber: {}", s.message());  // once per version
    last_refused_version = version;
  }
  return s;
}

}  // namespace weightsync
