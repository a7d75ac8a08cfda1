// StreamHasher over libxxhash's XXH3 streaming API.
#include "common/checksum.h"

#include <xxhash.h>

#include <new>

namespace weightsync::detail {

StreamHasher::StreamHasher() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();  // caught at the library boundary
  reset();
}

StreamHasher::~StreamHasher() {
  XXH3_freeState(state_);
}

void StreamHasher::reset() {
  XXH3_64bits_reset(state_);
}

void StreamHasher::update(const void* data, std::size_t bytes) {
  XXH3_64bits_update(state_, data, bytes);
}

std::uint64_t StreamHasher::digest() const {
  return XXH3_64bits_digest(state_);
}

}  // namespace weightsync::detail
