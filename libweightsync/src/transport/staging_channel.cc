// Staged reads (staging_channel.h).
#include "transport/staging_channel.h"

#include <algorithm>
#include <vector>

namespace weightsync::detail {

Result<std::uint64_t> StagingChannel::read(const ReadRequest& base) {
  StagingEngine& engine = *engine_;
  const std::size_t capacity = engine.chunk_bytes();
  const std::size_t chunks = engine.chunk_count();
  std::vector<ReadPiece> window;
  std::vector<ChunkCopy> copies;
  std::size_t window_index = 0;
  std::uint64_t stamp = base.stamp;
  Status failed;

  // Reads the gathered window into its chunk, then starts its device copies.
  auto flush = [&]() -> bool {
    if (window.empty()) return true;
    const std::size_t index = window_index % chunks;
    ReadRequest request = base;
    request.plan = &window;
    auto read = inner_.read(request);
    if (!read.ok()) {
      failed = read.status();
      return false;
    }
    stamp = *read;
    if (stamp != base.stamp) return false;  // torn: stop reading; the caller discards the pull
    if (Status s = engine.copy_out(index, copies); !s.ok()) {
      failed = s;
      return false;
    }
    window.clear();
    copies.clear();
    ++window_index;
    // The next window reuses this slot of the ring: its previous copies must be done.
    if (Status s = engine.wait(window_index % chunks); !s.ok()) {
      failed = s;
      return false;
    }
    return true;
  };

  std::size_t filled = 0;
  bool going = true;
  for (const ReadPiece& piece : *base.plan) {
    std::uint64_t done = 0;
    while (going && done < piece.length) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(capacity - filled, piece.length - done));
      char* staging = engine.chunk(window_index % chunks) + filled;
      window.push_back(ReadPiece{piece.slot_offset + done, n, staging});
      copies.push_back(ChunkCopy{static_cast<char*>(piece.dest) + done, filled, n});
      filled += n;
      done += n;
      if (filled == capacity) {
        going = flush();
        filled = 0;
      }
    }
    if (!going) break;
  }
  if (going) going = flush();
  // Wait for every chunk (also after a failure: no copy may outlive the call).
  for (std::size_t i = 0; i < chunks; ++i) {
    Status s = engine.wait(i);
    if (failed.ok() && !s.ok()) failed = s;
  }
  if (!failed.ok()) return failed;
  return stamp;
}

}  // namespace weightsync::detail
