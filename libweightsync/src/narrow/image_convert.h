// narrow/image_convert.h: whole-image conversion between a layout and its
// narrowed form, in chunks, with a stop flag (the NarrowingPublisher's
// converter abandons a conversion within one chunk when it is destroyed).
//
// Contract
// - convert_image(): `from` and `to` must have passed check_widenable() in
//   the right direction (the caller checks; this does not). Converts tensor
//   by tensor in chunks of kConvertChunkElements, checking `stop` (may be
//   null) between chunks; returns false when it stopped early (the
//   destination then holds part of the image), true when done.
// - Threads: none of its own; any thread.
#pragma once

#include <atomic>
#include <cstddef>

#include "weightsync/layout.h"

namespace weightsync::detail {

inline constexpr std::size_t kConvertChunkElements = std::size_t{1} << 20;

bool convert_image(const WeightLayout& from, const void* from_image, const WeightLayout& to, void* to_image,
                   const std::atomic<bool>* stop);

}  // namespace weightsync::detail
