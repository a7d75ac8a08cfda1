// Decode each link, XOR it into the destination's pieces, hash the result.
#include "delta/delta_apply.h"

#include "common/checksum.h"
#include "delta/delta_codec.h"

namespace weightsync::detail {

Result<std::uint64_t> apply_delta_chain(const DeltaChain& chain, const std::vector<std::uint8_t>& compressed,
                                        std::uint64_t image_bytes, const std::vector<ReadPiece>& pieces,
                                        DeltaApplyBuffers& buffers, const std::shared_ptr<const VersionKey>& key,
                                        const std::function<Status(std::size_t link)>& before_link) {
  std::uint64_t total = 0;
  bool overflow = false;
  for (const auto& link : chain.links) overflow |= __builtin_add_overflow(total, link.bytes, &total);
  if (overflow || compressed.size() != total) {
    return Status(ErrorCode::kInternal, "delta bytes do not match the chain's sizes");
  }
  for (const auto& piece : pieces) {
    if (piece.slot_offset > image_bytes || piece.length > image_bytes - piece.slot_offset) {
      return Status(ErrorCode::kInternal, "a piece lies outside the image");
    }
  }
  buffers.xor_image.resize(image_bytes);
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < chain.links.size(); ++i) {
    const auto& link = chain.links[i];
    if (before_link) {
      if (Status stop = before_link(i); !stop.ok()) return stop;
    }
    Status s = decode_delta(compressed.data() + at, link.bytes, image_bytes, chain.element_bytes, buffers.scratch,
                            buffers.xor_image.data());
    if (!s.ok()) {
      return Status(s.code(), "delta " + std::to_string(link.from) + " -> " + std::to_string(link.to) + ": " +
                                  s.message());
    }
    at += link.bytes;
    for (const auto& piece : pieces) {
      xor_into(static_cast<std::uint8_t*>(piece.dest), buffers.xor_image.data() + piece.slot_offset,
               piece.length);
    }
  }
  StreamHasher hasher(key);
  for (const auto& piece : pieces) hasher.update(piece.dest, piece.length);
  return hasher.digest();
}

}  // namespace weightsync::detail
