// Shared-memory transport, subscriber side.
#include "transport/shm/shm_data_channel.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "net/unix_socket.h"
#include "transport/direct_copy.h"
#include "wire/messages.h"

namespace weightsync::detail {
namespace {

// A read-only mapping of one received descriptor.
class ReadOnlyMapping {
 public:
  static Result<ReadOnlyMapping> map(int fd, std::uint64_t min_bytes) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < min_bytes) {
      return Status(ErrorCode::kProtocolError, "publisher's shared memory is smaller than announced");
    }
    void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      return Status(ErrorCode::kConnectionLost,
                    std::string("cannot map the publisher's shared memory: ") + std::strerror(errno));
    }
    ReadOnlyMapping m;
    m.data_ = p;
    m.size_ = static_cast<std::size_t>(st.st_size);
    return m;
  }
  ReadOnlyMapping() = default;
  ReadOnlyMapping(ReadOnlyMapping&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }
  ReadOnlyMapping& operator=(ReadOnlyMapping&&) = delete;
  ~ReadOnlyMapping() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  const char* data() const { return static_cast<const char*>(data_); }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

class ShmDataChannel final : public DataChannel {
 public:
  ShmDataChannel(std::vector<ReadOnlyMapping> slots, ReadOnlyMapping stamps, std::uint64_t slot_bytes)
      : slots_(std::move(slots)), stamps_(std::move(stamps)), slot_bytes_(slot_bytes) {}

  const char* name() const override { return "shm"; }

  Result<std::uint64_t> read(const ReadRequest& request) override {
    if (request.slot >= slots_.size())
      return Status(ErrorCode::kProtocolError, "lease names a slot out of range");
    const auto* stamp = reinterpret_cast<const std::atomic<std::uint64_t>*>(stamps_.data()) + request.slot;
    return copy_mapped_slot(request, slots_[request.slot].data(), slot_bytes_, stamp);
  }

  void close() override {}

 private:
  std::vector<ReadOnlyMapping> slots_;
  ReadOnlyMapping stamps_;
  std::uint64_t slot_bytes_;
};

}  // namespace

Result<std::unique_ptr<DataChannel>> open_shm_data_channel(const LocalChannelConfig& config) {
  auto local = open_local_session(config, MsgType::kShmRegions);
  if (!local.ok()) return local.status();
  const Deadline deadline = local->deadline;
  auto regions = ShmRegionsMsg::decode(local->regions.payload);
  if (!regions.ok()) return regions.status();
  if (regions->slot_count != config.slot_count || regions->slot_bytes != config.slot_bytes) {
    return Status(ErrorCode::kProtocolError, "publisher's shared regions do not match its slot table");
  }
  auto fds = recv_fds(local->socket, regions->slot_count + 1, deadline, kLocalPublisherPeer);
  if (!fds.ok()) return fds.status();
  std::vector<ReadOnlyMapping> slots;
  Status failed;
  for (std::uint32_t i = 0; i < regions->slot_count && failed.ok(); ++i) {
    auto m = ReadOnlyMapping::map((*fds)[i], regions->slot_bytes);
    if (m.ok()) {
      slots.push_back(std::move(*m));
    } else {
      failed = m.status();
    }
  }
  auto stamps = failed.ok() ? ReadOnlyMapping::map(fds->back(), regions->slot_count * sizeof(std::uint64_t))
                            : Result<ReadOnlyMapping>(failed);
  for (int fd : *fds) ::close(fd);  // the mappings keep the memory alive
  if (!stamps.ok()) return stamps.status();
  return std::unique_ptr<DataChannel>(
      new ShmDataChannel(std::move(slots), std::move(*stamps), regions->slot_bytes));
}

}  // namespace weightsync::detail
