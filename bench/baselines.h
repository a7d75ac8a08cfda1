// The machine's limits, measured by weightsync-bench in the same run as the
// transports: memcpy, a raw loopback TCP stream, iperf3, ucx_perftest and
// Peralta's "dumb thing" (write a checkpoint file, read it back).
//
// Contract: every function runs on the calling thread (it may start helper
// threads or processes and always reaps them), never throws, and never hangs:
// an external tool gets a time limit and is killed past it. A figure that
// cannot be measured (tool not installed, tool failed) has gbps = NaN and a
// note saying why and what to install. GB = 10^9 bytes.
#pragma once

#include <cstdint>
#include <string>

#include "records.h"

namespace wsbench {

// memcpy of `bytes` between two pre-faulted buffers, split across `threads`
// threads (each copies a contiguous share); median over `repetitions`.
BaselineFigure measure_memcpy(std::uint64_t bytes, int threads, int repetitions);

// Our own minimal sender and receiver over one loopback TCP connection:
// `bytes` streamed from a buffer into another, median over `repetitions`.
BaselineFigure measure_tcp_raw(std::uint64_t bytes, int repetitions);

// iperf3, one stream over 127.0.0.1 for `seconds` (iperf3 -J), if installed.
BaselineFigure measure_iperf3(double seconds);

// ucx_perftest -t ucp_get with UCX_TLS=`tls` and message size `bytes`
// (server and client on 127.0.0.1), if installed. ucx_perftest reports MB/s
// with MB = 2^20 bytes; this converts to GB/s (10^9).
BaselineFigure measure_ucx_perftest(const std::string& tls, std::uint64_t bytes, int repetitions);

// A checkpoint round trip: write `bytes` to a new file in `directory`, then
// read it back into another buffer. page_cache: plain write + read (the
// bytes stay in the page cache). forced_to_disk: write + fsync, evict the
// file's pages (posix_fadvise DONTNEED), then read from the disk.
// gbps = bytes / (write + read seconds). The file is removed afterwards.
// forced_to_disk = false skips that variant (it takes seconds per GiB).
struct CheckpointFigures {
  BaselineFigure page_cache;
  BaselineFigure forced_to_disk;
};
CheckpointFigures measure_checkpoint_file(std::uint64_t bytes, const std::string& directory, int repetitions,
                                          bool forced_to_disk = true);

}  // namespace wsbench
