// A pull by deltas: the chain from the version the destination holds,
// fetched, applied in place and checked against the target's checksum.
#include "subscriber/subscriber_impl.h"

#include <algorithm>

#include "delta/delta_apply.h"

namespace weightsync {

Result<PullResult> Subscriber::Impl::delta_attempt(const PullPlan::State& plan, std::uint64_t newer_than,
                                                   const PullOptions& pull_options, std::uint64_t latest) {
  detail::FetchDeltaMsg request;
  request.have = *pull_options.delta_base;
  request.at_least = std::max(latest, newer_than + 1);
  request.max_bytes = plan.bytes;  // what the full pull moves
  request.wait_ms = detail::kMaxDeltaWaitMs;
  if (request.at_least <= request.have) {
    return Status(ErrorCode::kNotReady,
                  "the destination already holds version " + std::to_string(request.have));
  }
  auto chain = note(control.fetch_delta(request, delta_bytes));
  if (!chain.ok()) return chain.status();
  // Each link costs a slot-sized decode and XOR: a chain longer than the
  // publisher keeps, or than kMaxDeltaChainApplied, is refused before any is
  // applied (not sticky: the stream is in step; the pull goes on in full).
  const std::size_t links = chain->links.size();
  const std::uint32_t most = delta_history > 0 ? std::min(delta_history, detail::kMaxDeltaChainApplied)
                                               : detail::kMaxDeltaChainApplied;
  if (links > most) {
    return Status(ErrorCode::kProtocolError,
                  "the publisher sent a chain of " + std::to_string(links) + " deltas; at most " +
                      std::to_string(most) + " are applied (its delta_history is " +
                      std::to_string(delta_history) + ", the bound " +
                      std::to_string(detail::kMaxDeltaChainApplied) + "): pulling in full");
  }
  if (pull_options.on_start) pull_options.on_start(chain->links.back().to, false);
  // Between links: the pull's cancellation, and the I/O timeout for the whole chain.
  const auto apply_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(io_timeout_ms);
  const Cancellation& cancel = pull_options.cancel;
  const auto before_link = [&](std::size_t link) -> Status {
    if (cancel.active() && cancel.requested())
      return cancelled("applying deltas for a version newer than", newer_than);
    if (std::chrono::steady_clock::now() > apply_until) {
      return Status(ErrorCode::kTimeout, "applying " + std::to_string(links) +
                                             " deltas took longer than the I/O timeout (" +
                                             std::to_string(link) + " applied): pulling in full");
    }
    return Status();
  };
  detail::DeltaChain decoded;
  decoded.element_bytes = chain->element_bytes;
  decoded.links.reserve(links);
  for (const auto& link : chain->links) decoded.links.push_back({link.from, link.to, link.bytes});
  auto sum = detail::apply_delta_chain(decoded, delta_bytes, layout.total_bytes(), plan.pieces, delta_buffers,
                                       version_key, before_link);
  if (!sum.ok()) return sum.status();
  const detail::DeltaLinkHeader& last = chain->links.back();
  if (*sum != last.checksum) {
    return Status(ErrorCode::kChecksumMismatch,
                  "version " + std::to_string(last.to) + " rebuilt from deltas from version " +
                      std::to_string(request.have) +
                      " does not match its checksum (the destination did not hold " +
                      "that version, or the bytes were changed in transit)");
  }
  PullResult out;
  out.version = last.to;
  out.bytes = plan.bytes;
  out.delta = true;
  out.wire_bytes = delta_bytes.size();
  out.checksum_verified = true;
  out.checksum = last.checksum;
  if (pull_options.on_progress) pull_options.on_progress(out.bytes, out.bytes);
  return out;
}

}  // namespace weightsync
