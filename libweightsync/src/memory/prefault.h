// prefault_writable: maps every page of a block of host memory now, writable,
// so that the first writes into it (a pull, a receive) do not take one page
// fault per 4 KiB page on the hot path.
//
// Contract: `data` is page-aligned host memory of `bytes` bytes, writable by
// the caller and zero-filled (SlotMemory, HostBuffer); its contents do not
// change. Best effort: MADV_POPULATE_WRITE (Linux 5.14), else one write of
// zero per page; nothing fails. Call it before the memory is shared with any
// reader or writer (the fallback writes). Any thread; never throws.
// Why: docs/perf/relay_cpu.md (a relay's first versions into fresh slots),
// and staged/staging_area.cc (the first pull into a fresh staging buffer).
#pragma once

#include <cstddef>

namespace weightsync::detail {

void prefault_writable(void* data, std::size_t bytes) noexcept;

}  // namespace weightsync::detail
