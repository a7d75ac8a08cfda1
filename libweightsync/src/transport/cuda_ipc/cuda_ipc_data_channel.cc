// CUDA IPC transport, subscriber side.
#include "transport/cuda_ipc/cuda_ipc_data_channel.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/host_identity.h"
#include "cuda/cuda_runtime.h"
#include "net/unix_socket.h"
#include "wire/messages.h"

namespace weightsync::detail {
namespace {

class CudaIpcDataChannel final : public DataChannel {
 public:
  CudaIpcDataChannel(std::vector<IpcMapping> slots, const void* stamps, std::size_t stamps_mapped,
                     std::uint64_t slot_bytes, CudaStream stream)
      : slots_(std::move(slots)),
        stamps_(stamps),
        stamps_mapped_(stamps_mapped),
        slot_bytes_(slot_bytes),
        stream_(std::move(stream)) {}
  ~CudaIpcDataChannel() override { ::munmap(const_cast<void*>(stamps_), stamps_mapped_); }

  const char* name() const override { return "cuda_ipc"; }
  bool writes_device_memory() const override { return true; }

  Result<std::uint64_t> read(const ReadRequest& request) override {
    if (request.slot >= slots_.size())
      return Status(ErrorCode::kProtocolError, "lease names a slot out of range");
    const auto* stamp = static_cast<const std::atomic<std::uint64_t>*>(stamps_) + request.slot;
    if (stamp->load(std::memory_order_acquire) != request.stamp) {
      return Status(ErrorCode::kVersionRevoked, "slot was rewritten before the read; pull again");
    }
    const char* base = static_cast<const char*>(slots_[request.slot].data());
    for (const ReadPiece& piece : *request.plan) {
      if (piece.slot_offset > slot_bytes_ || piece.length > slot_bytes_ - piece.slot_offset) {
        return Status(ErrorCode::kInternal, "read plan outside the slot");
      }
      Status s = copy_async(piece.dest, base + piece.slot_offset, piece.length, stream_.handle());
      if (!s.ok()) return s;
    }
    if (Status s = stream_.synchronize(); !s.ok()) return s;
    // Progress only (the publisher offers no checksum with CUDA slots, so
    // on_bytes never reads these bytes).
    for (const ReadPiece& piece : *request.plan) {
      if (request.on_bytes) request.on_bytes(piece.dest, piece.length);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    return stamp->load(std::memory_order_relaxed);
  }

  void close() override {}

 private:
  std::vector<IpcMapping> slots_;
  const void* stamps_;
  std::size_t stamps_mapped_;
  std::uint64_t slot_bytes_;
  CudaStream stream_;
};

}  // namespace

TransportInfo probe_cuda_ipc() {
  TransportInfo info{
      "cuda_ipc", "same-host CUDA IPC: device-to-device copy from the publisher's GPU slot (CUDA slots only)",
      false, ""};
  info.reads_cuda_slots = true;
  info.writes_cuda_memory = true;
  const CudaInfo cuda = cuda_info();
  if (!cuda.usable) {
    info.reason = cuda.reason;
  } else if (auto host = host_identity(); !host.ok() || host->empty()) {
    info.reason = host.ok() ? "cannot read /proc/sys/kernel/random/boot_id or /proc/self/ns/net, so "
                              "same-host peers cannot be recognised"
                            : host.status().message();
  } else {
    info.viable = true;
  }
  return info;
}

Result<std::unique_ptr<DataChannel>> open_cuda_ipc_data_channel(const LocalChannelConfig& config) {
  if (Status ready = cuda_ready(); !ready.ok()) return ready;
  auto local = open_local_session(config, MsgType::kCudaIpcRegions);
  if (!local.ok()) return local.status();
  auto regions = CudaIpcRegionsMsg::decode(local->regions.payload);
  if (!regions.ok()) return regions.status();
  if (regions->slot_count != config.slot_count || regions->slot_bytes != config.slot_bytes) {
    return Status(ErrorCode::kProtocolError, "publisher's CUDA regions do not match its slot table");
  }
  auto fds = recv_fds(local->socket, 1, local->deadline, kLocalPublisherPeer);
  if (!fds.ok()) return fds.status();
  const int stamp_fd = fds->front();
  struct stat st {};
  if (::fstat(stamp_fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < regions->stamp_bytes) {
    ::close(stamp_fd);
    return Status(ErrorCode::kProtocolError, "publisher's stamp page is smaller than announced");
  }
  const auto mapped = static_cast<std::size_t>(st.st_size);
  void* stamps = ::mmap(nullptr, mapped, PROT_READ, MAP_SHARED, stamp_fd, 0);
  ::close(stamp_fd);
  if (stamps == MAP_FAILED) {
    return Status(ErrorCode::kConnectionLost,
                  std::string("cannot map the publisher's stamp page: ") + std::strerror(errno));
  }
  std::vector<IpcMapping> slots;
  for (const auto& handle : regions->handles) {
    auto mapping = IpcMapping::open(handle);
    if (!mapping.ok()) {
      ::munmap(stamps, mapped);
      return mapping.status();
    }
    slots.push_back(std::move(*mapping));
  }
  auto stream = CudaStream::create();
  if (!stream.ok()) {
    ::munmap(stamps, mapped);
    return stream.status();
  }
  return std::unique_ptr<DataChannel>(
      new CudaIpcDataChannel(std::move(slots), stamps, mapped, regions->slot_bytes, std::move(*stream)));
}

}  // namespace weightsync::detail
