// Same-host transports, publisher side: the local socket, SHM_REGIONS or
// CUDA_IPC_REGIONS and the descriptors that go with them.
#include "transport/local_server.h"

#include <fmt/format.h>
#include <unistd.h>

#include "common/random.h"
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

class LocalServer final : public ServedTransport {
 public:
  LocalServer(const char* name, std::string host) : name_(name), host_(std::move(host)) {}
  const char* name() const override { return name_; }

  Status start(SlotRing& ring) override {
    if (ring.slot_count() + 1 > kMaxPassedFds) {
      return Status(ErrorCode::kInvalidConfig, "more slots than descriptors one message can pass");
    }
    if (ring.slot_memory_kind() != MemoryKind::kCuda && !ring.slot_region(0).shareable_by_descriptor()) {
      return Status(ErrorCode::kInvalidConfig,
                    "the slots were allocated by UCX (slot allocator 'ucx'), which cannot hand them out as "
                    "read-only descriptors");
    }
    std::uint8_t token[16];
    if (Status random = random_bytes(token, sizeof(token)); !random.ok()) return random;
    std::string socket_name = "weightsync-";
    for (std::uint8_t b : token) socket_name += fmt::format("{:02x}", b);
    auto listener = listen_unix_abstract(socket_name);
    if (!listener.ok()) return Status(ErrorCode::kInvalidConfig, listener.status().message());
    listener_ = std::move(*listener);
    ring_ = &ring;
    offer_ = ShmOffer{host_, socket_name}.encode();
    return Status();
  }
  const std::vector<std::uint8_t>& offer() const override { return offer_; }
  std::optional<Role> connection_role() const override { return Role::kShm; }
  Socket take_local_listener() override { return std::move(listener_); }
  ConnectionReply serve_connection(const ConnectionRequest& request) override {
    return ConnectionReply{serve_local_regions(*request.socket, *ring_, request.io_timeout_ms), true};
  }

 private:
  const char* name_;
  std::string host_;
  Socket listener_;
  const SlotRing* ring_ = nullptr;
  std::vector<std::uint8_t> offer_;
};

}  // namespace

std::unique_ptr<ServedTransport> make_local_server(const char* name, std::string host) {
  return std::make_unique<LocalServer>(name, std::move(host));
}

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
