// Same-host transports, publisher side: SHM_REGIONS or CUDA_IPC_REGIONS and
// the descriptors that go with them.
#include <unistd.h>

#include "transport/shm/shm_server.h"

#include "net/unix_socket.h"
#include "wire/frame_io.h"
#include "wire/messages.h"

namespace weightsync::detail {

namespace {

constexpr const char* kPeer = "subscriber";

Status serve_cuda_ipc(const Socket& socket, const SlotRing& ring, Deadline io) {
  CudaIpcRegionsMsg msg;
  msg.slot_count = static_cast<std::uint32_t>(ring.slot_count());
  msg.slot_bytes = ring.slot_bytes();
  msg.stamp_bytes = ring.stamp_region().size();
  for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
    auto handle = ring.slot_region(i).cuda_ipc_handle();
    if (!handle.ok()) return reply_error(socket, ErrorCode::kInternal, handle.status().message(), io, kPeer);
    msg.handles.push_back(*handle);
  }
  auto stamp_fd = ring.stamp_region().open_read_only();
  if (!stamp_fd.ok())
    return reply_error(socket, ErrorCode::kInternal, stamp_fd.status().message(), io, kPeer);
  Status s = write_frame(socket, MsgType::kCudaIpcRegions, msg.encode(), io, kPeer);
  if (s.ok()) s = send_fds(socket, {*stamp_fd}, io, kPeer);
  ::close(*stamp_fd);
  return s;
}

}  // namespace

Status serve_local_regions(const Socket& socket, const SlotRing& ring, int io_timeout_ms) {
  const Deadline io = Deadline::after(std::chrono::milliseconds(io_timeout_ms));
  if (ring.slot_memory_kind() == MemoryKind::kCuda) return serve_cuda_ipc(socket, ring, io);
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
    auto fd = ring.slot_region(i).open_read_only();
    if (!fd.ok()) {
      close_all();
      return reply_error(socket, ErrorCode::kInternal, fd.status().message(), io, kPeer);
    }
    fds.push_back(*fd);
  }
  auto stamp_fd = ring.stamp_region().open_read_only();
  if (!stamp_fd.ok()) {
    close_all();
    return reply_error(socket, ErrorCode::kInternal, stamp_fd.status().message(), io, kPeer);
  }
  fds.push_back(*stamp_fd);

  ShmRegionsMsg msg{static_cast<std::uint32_t>(ring.slot_count()), ring.slot_bytes(),
                    ring.stamp_region().size()};
  Status s = write_frame(socket, MsgType::kShmRegions, msg.encode(), io, kPeer);
  if (s.ok()) s = send_fds(socket, fds, io, kPeer);
  close_all();
  return s;
}

}  // namespace weightsync::detail
