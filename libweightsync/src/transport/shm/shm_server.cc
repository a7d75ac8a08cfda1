// Same-host transports, publisher side: after the handshake on the local
// Unix socket, send SHM_REGIONS and the read-only descriptors of every slot
// and of the stamp page (shm), or, when the slots are CUDA memory,
// CUDA_IPC_REGIONS with each slot's CUDA IPC handle and the stamp page's
// descriptor (cuda_ipc). The subscriber maps them once and reads one-sidedly.
#include <unistd.h>

#include "net/unix_socket.h"
#include "publisher/connection_handlers.h"
#include "wire/frame_io.h"

namespace weightsync::detail {

namespace {

Status serve_cuda_ipc(const HandlerContext& ctx) {
  const SlotRing& ring = *ctx.state->ring;
  CudaIpcRegionsMsg msg;
  msg.slot_count = static_cast<std::uint32_t>(ring.slot_count());
  msg.slot_bytes = ring.slot_bytes();
  msg.stamp_bytes = ring.stamp_region().size();
  for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
    auto handle = ring.slot_region(i).cuda_ipc_handle();
    if (!handle.ok()) return reply_error(ctx, ErrorCode::kInternal, handle.status().message());
    msg.handles.push_back(*handle);
  }
  auto stamp_fd = ring.stamp_region().open_read_only();
  if (!stamp_fd.ok()) return reply_error(ctx, ErrorCode::kInternal, stamp_fd.status().message());
  const Deadline io = Deadline::after(std::chrono::milliseconds(ctx.io_timeout_ms));
  Status s = write_frame(*ctx.socket, MsgType::kCudaIpcRegions, msg.encode(), io, "subscriber");
  if (s.ok()) s = send_fds(*ctx.socket, {*stamp_fd}, io, "subscriber");
  ::close(*stamp_fd);
  return s;
}

}  // namespace

Status serve_shm(const HandlerContext& ctx) {
  const SlotRing& ring = *ctx.state->ring;
  if (ring.slot_memory_kind() == MemoryKind::kCuda) return serve_cuda_ipc(ctx);
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
    auto fd = ring.slot_region(i).open_read_only();
    if (!fd.ok()) {
      close_all();
      return reply_error(ctx, ErrorCode::kInternal, fd.status().message());
    }
    fds.push_back(*fd);
  }
  auto stamp_fd = ring.stamp_region().open_read_only();
  if (!stamp_fd.ok()) {
    close_all();
    return reply_error(ctx, ErrorCode::kInternal, stamp_fd.status().message());
  }
  fds.push_back(*stamp_fd);

  const Deadline io = Deadline::after(std::chrono::milliseconds(ctx.io_timeout_ms));
  ShmRegionsMsg msg{static_cast<std::uint32_t>(ring.slot_count()), ring.slot_bytes(),
                    ring.stamp_region().size()};
  Status s = write_frame(*ctx.socket, MsgType::kShmRegions, msg.encode(), io, "subscriber");
  if (s.ok()) s = send_fds(*ctx.socket, fds, io, "subscriber");
  close_all();
  return s;
}

}  // namespace weightsync::detail
