// narrow/narrowing_hooks.h: a test hook of the NarrowingPublisher's
// converter (tests only; never set in production).
//
// Contract
// - set_narrowing_convert_hook(f): every converter thread calls f(version)
//   just before it converts a version (after taking it from staging, before
//   begin_publish). A test blocks it there to hold a conversion "in
//   progress" deterministically. An empty function removes it.
// - Threads: set it while no NarrowingPublisher exists; the converter reads
//   it under a mutex and calls a copy.
#pragma once

#include <cstdint>
#include <functional>

namespace weightsync::detail {

using NarrowingConvertHook = std::function<void(std::uint64_t version)>;

void set_narrowing_convert_hook(NarrowingConvertHook hook);
NarrowingConvertHook narrowing_convert_hook();

}  // namespace weightsync::detail
