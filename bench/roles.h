// The two processes weightsync-bench runs per cell, and the line protocol the
// orchestrator (sweep.cc) drives them with. Each role reads one command per
// line and answers with one line; "ERROR <message>" answers any failure, after
// which the orchestrator gives up on the cell. All times are steady-clock
// (CLOCK_MONOTONIC, comparable across processes on one host) nanoseconds or
// seconds.
//
// Publisher role (a child on stdin/stdout, or `weightsync-bench server` on a
// TCP connection):
//   SETUP <size_bytes> [<source> <slots>]
//                           -> READY <address> <slot_allocator>
//                              source: host (default; publish() from a HostBuffer) or cuda
//                              (publish_from_device() from cudaMalloc memory); slots: host
//                              (default) or cuda (PublisherOptions::slot_memory = kCuda)
//   PUBLISH <v>             -> COMMITTED <v> <copy_s> <commit_ns>  (a cuda source: copy_s is
//                              flush_device_publishes()' copy_seconds, enqueue to commit)
//   SERVED                  -> SERVED <cpu_s> <compute_rate> <window_s>  (since the last commit;
//                              cpu_s excludes the compute loop; compute_rate is loop passes/s, 0
//                              when it is off; window_s is the time since the commit)
//   IDLE <seconds>          -> IDLE <compute_rate>  (the loop's rate with nobody pulling, for a window
//                              as long as the last pull; needs COMPUTE ON)
//   COMPUTE ON              -> COMPUTE <idle_rate>  (starts the loop, measures it alone for 300 ms)
//   COMPUTE OFF             -> COMPUTE OFF
//   TEARDOWN                -> TEARDOWN             (drops the Publisher; SETUP may follow)
//   QUIT                    -> (exits)
// Reader role (a child on stdin/stdout; started with the publisher's address,
// transport, size and destination memory, host or cuda):
//   (on start)              -> READY <transport>
//   PULL <v>                -> COPIED <memcpy_s>  (a memcpy of the same size into the destination:
//                              the paired baseline; 0 for a cuda destination, which has none), then,
//                              once v is published,
//                           -> HELD <v> <pull_s> <held_ns> <cpu_s> <staged>   (waits up to 60 s for v,
//                              then one Subscriber::pull into the pre-faulted buffer; checks the
//                              version marks; staged: PullResult::staged, 0 or 1)
//   QUIT                    -> (exits)
#pragma once

#include <cstdint>
#include <string>

#include "line_stream.h"

namespace wsbench {

struct PublisherRoleConfig {
  std::string bind = "127.0.0.1";
  std::size_t slots = 3;
};

// Serves commands on `io` until QUIT or end of stream. Returns the exit code.
int run_publisher_role(wsutil::LineStream& io, const PublisherRoleConfig& config);

struct ReaderRoleConfig {
  std::string address;
  std::string transport;  // forced: "tcp", "shm", "ucx", "verbs", "cuda_ipc"
  std::uint64_t size = 0;
  std::string destination = "host";  // "host" (HostBuffer) or "cuda" (cudaMalloc, MemoryKind::kCuda)
};

int run_reader_role(wsutil::LineStream& io, const ReaderRoleConfig& config);

// The 8-byte marks at both ends of a published image that let a reader check
// it got version v (the bytes in between are left as they are: a copy of them
// is what is measured).
void mark_image(void* image, std::uint64_t size, std::uint64_t version);
bool image_has_marks(const void* image, std::uint64_t size, std::uint64_t version);
// The same two marks as values: `head` at offset 0, `tail` at size - 8.
void image_marks(std::uint64_t version, std::uint64_t* head, std::uint64_t* tail);

}  // namespace wsbench
