// Shared-memory transport, subscriber side.
#include "transport/shm/shm_data_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "net/unix_socket.h"
#include "transport/direct_copy.h"
#include "wire/messages.h"

namespace weightsync::detail {
namespace {

std::string to_hex(int value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%x", static_cast<unsigned>(value));
  return buf;
}

// The seals of a publisher's SharedRegion (memory/shared_region.cc) that
// protect a reader: without SHRINK the file could be truncated under our
// mapping and a read would die of SIGBUS; without GROW and a write seal
// (FUTURE_WRITE, or the stronger WRITE) the memory is not the region only its
// owner's mapping can write. F_SEAL_SEAL is not needed: seals never go away.
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;
constexpr int kWriteSeals = F_SEAL_FUTURE_WRITE | F_SEAL_WRITE;

// The size of `fd` (received from the publisher, announced as `what`) when
// it is a memfd sealed as above and at least `min_bytes` long; otherwise
// kProtocolError naming the problem. Once sealed, the size cannot change.
Result<std::size_t> checked_size(int fd, std::uint64_t min_bytes, const std::string& what) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return Status(ErrorCode::kProtocolError,
                  "publisher's " + what +
                      " is not sealable shared memory (F_GET_SEALS: " + std::strerror(errno) +
                      "); refusing to map it (is the publisher a weightsync publisher?)");
  }
  if ((seals & kRequiredSeals) != kRequiredSeals || (seals & kWriteSeals) == 0) {
    return Status(ErrorCode::kProtocolError,
                  "publisher's " + what + " is not sealed against shrink, grow and write (seals 0x" +
                      to_hex(seals) + ", need 0x" + to_hex(kRequiredSeals | F_SEAL_FUTURE_WRITE) +
                      "); refusing to map it: it could be truncated under the mapping");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status(ErrorCode::kProtocolError,
                  "cannot stat the publisher's " + what + ": " + std::string(std::strerror(errno)));
  }
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) < min_bytes) {
    return Status(ErrorCode::kProtocolError, "publisher's " + what + " holds " + std::to_string(st.st_size) +
                                                 " bytes, less than the " + std::to_string(min_bytes) +
                                                 " it announced; refusing to map it");
  }
  return static_cast<std::size_t>(st.st_size);
}

// A read-only mapping of one received descriptor, checked first.
class ReadOnlyMapping {
 public:
  static Result<ReadOnlyMapping> map(int fd, std::uint64_t min_bytes, const std::string& what) {
    auto size = checked_size(fd, min_bytes, what);
    if (!size.ok()) return size.status();
    void* p = ::mmap(nullptr, *size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      return Status(ErrorCode::kConnectionLost,
                    std::string("cannot map the publisher's shared memory: ") + std::strerror(errno));
    }
    ReadOnlyMapping m;
    m.data_ = p;
    m.size_ = *size;
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

  std::optional<std::uint64_t> newest_committed() const override {
    return newest_committed_stamp(reinterpret_cast<const std::atomic<std::uint64_t>*>(stamps_.data()),
                                  slots_.size());
  }

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
    auto m = ReadOnlyMapping::map((*fds)[i], regions->slot_bytes, "slot " + std::to_string(i));
    if (m.ok()) {
      slots.push_back(std::move(*m));
    } else {
      failed = m.status();
    }
  }
  auto stamps = failed.ok() ? ReadOnlyMapping::map(fds->back(), regions->slot_count * sizeof(std::uint64_t),
                                                   "stamp page")
                            : Result<ReadOnlyMapping>(failed);
  for (int fd : *fds) ::close(fd);  // the mappings keep the memory alive
  if (!stamps.ok()) return stamps.status();
  return std::unique_ptr<DataChannel>(
      new ShmDataChannel(std::move(slots), std::move(*stamps), regions->slot_bytes));
}

}  // namespace weightsync::detail
