// UCX transport, publisher side: every slot and the stamp page are mapped
// with ucp_mem_map once, here (or allocated by UCX, when its shared-memory
// transports are selected), and their rkeys packed into the offer. A progress
// thread drives the worker (UCX's tcp transport and connection wireup need
// the target to progress), sleeping on the worker's event fd.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "transport/ucx/ucx_handles.h"
#include "transport/ucx/ucx_offer.h"
#include "transport/ucx/ucx_transport.h"

namespace weightsync::detail {
namespace {

// A block UCX allocated (UCP_MEM_MAP_ALLOCATE). Keeps the context alive
// until it is unmapped. Not shareable by descriptor: UCX owns the backing.
class UcxSlotMemory final : public SlotMemory {
 public:
  UcxSlotMemory(UcxContext context, ucp_mem_h memh, void* data, std::size_t size, std::size_t mapped,
                bool locked)
      : context_(std::move(context)),
        memh_(memh),
        data_(data),
        size_(size),
        mapped_(mapped),
        locked_(locked) {}
  ~UcxSlotMemory() override {
    if (locked_) ::munlock(data_, mapped_);
    ucp_mem_unmap(context_.get(), memh_);
  }
  UcxSlotMemory(const UcxSlotMemory&) = delete;
  UcxSlotMemory& operator=(const UcxSlotMemory&) = delete;

  void* data() const noexcept override { return data_; }
  std::size_t size() const noexcept override { return size_; }
  std::size_t mapped_size() const noexcept override { return mapped_; }
  bool shareable_by_descriptor() const noexcept override { return false; }
  Result<int> open_read_only() const override {
    return Status(ErrorCode::kInvalidConfig,
                  "slot memory allocated by UCX cannot be handed over as a descriptor; set "
                  "WEIGHTSYNC_SLOT_ALLOCATOR=memfd to offer the shm transport");
  }
  ucp_context_h context() const noexcept { return context_.get(); }
  ucp_mem_h memh() const noexcept { return memh_; }

 private:
  UcxContext context_;
  ucp_mem_h memh_;
  void* data_;
  std::size_t size_, mapped_;
  bool locked_;
};

Result<std::unique_ptr<SlotMemory>> allocate_with_ucx(const UcxContext& context, std::size_t bytes,
                                                      bool lock) {
  if (bytes == 0) return Status(ErrorCode::kInvalidArgument, "slot size must be > 0");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (bytes + page - 1) / page * page;
  ucp_mem_map_params_t params{};
  params.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = mapped;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context.get(), &params, &memh);
  if (st != UCS_OK) {
    return Status(
        ErrorCode::kInvalidConfig,
        ucx_error("UCX could not allocate " + std::to_string(mapped) + " bytes of slot memory", st));
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  st = ucp_mem_query(memh, &attr);
  if (st != UCS_OK || attr.address == nullptr || attr.length < mapped ||
      reinterpret_cast<std::uintptr_t>(attr.address) % page != 0) {
    ucp_mem_unmap(context.get(), memh);
    return Status(ErrorCode::kInvalidConfig,
                  "UCX allocated slot memory that is not page-aligned (check UCX_MEM_ALLOC_METHODS); set "
                  "WEIGHTSYNC_SLOT_ALLOCATOR=memfd");
  }
  auto memory = std::make_unique<UcxSlotMemory>(context, memh, attr.address, bytes, mapped, /*locked=*/false);
  // Zero-fill as the contract says; this also faults every page in now, not
  // during the first publish.
  std::memset(attr.address, 0, mapped);
  if (lock) {
    if (::mlock(attr.address, mapped) != 0) {
      return Status(ErrorCode::kInvalidConfig,
                    "cannot lock " + std::to_string(mapped) + " bytes in RAM (" + std::strerror(errno) +
                        "); raise RLIMIT_MEMLOCK (ulimit -l) or set lock_memory = false");
    }
    memory = std::make_unique<UcxSlotMemory>(context, memh, attr.address, bytes, mapped, /*locked=*/true);
  }
  return std::unique_ptr<SlotMemory>(std::move(memory));
}

class UcxServer final : public UcxPublisherTransport {
 public:
  explicit UcxServer(UcxEndpointStack stack) : stack_(std::move(stack)) {}

  ~UcxServer() override {
    stopping_ = true;
    if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
    if (progress_.joinable()) progress_.join();
    for (ucp_mem_h memh : memhs_) ucp_mem_unmap(stack_.context.get(), memh);
    for (int fd : wake_) {
      if (fd >= 0) ::close(fd);
    }
  }

  bool wants_own_memory() const override { return ucx_tls_has_shared_memory(); }

  SlotAllocator slot_allocator(bool lock_memory) override {
    UcxContext context = stack_.context;
    return SlotAllocator{"ucx", [context, lock_memory](std::size_t bytes, const char*) {
                           return allocate_with_ucx(context, bytes, lock_memory);
                         }};
  }

  Status start(const SlotRing& ring) override {
    UcxOffer offer;
    for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
      auto region = expose(ring.slot_region(i));
      if (!region.ok()) return region.status();
      offer.slots.push_back(std::move(*region));
    }
    auto stamps = expose(ring.stamp_region());
    if (!stamps.ok()) return stamps.status();
    offer.stamps = std::move(*stamps);
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    ucs_status_t st = ucp_worker_get_address(stack_.worker.get(), &address, &length);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_worker_get_address", st));
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(address);
    offer.worker_address.assign(bytes, bytes + length);
    ucp_worker_release_address(stack_.worker.get(), address);
    offer_ = offer.encode();
    st = ucp_worker_get_efd(stack_.worker.get(), &efd_);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_worker_get_efd", st));
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      return Status(ErrorCode::kInternal, std::string("pipe2: ") + std::strerror(errno));
    }
    progress_ = std::thread([this] { progress_loop(); });
    return Status::ok_status();
  }

  const std::vector<std::uint8_t>& offer() const override { return offer_; }

 private:
  // The rkey of a block: its own mapping when this context allocated it,
  // else a new ucp_mem_map registration kept until destruction.
  Result<UcxRegion> expose(const SlotMemory& memory) {
    const auto* own = dynamic_cast<const UcxSlotMemory*>(&memory);
    if (own != nullptr && own->context() == stack_.context.get()) {
      return pack(own->memh(), memory.data(), memory.mapped_size());
    }
    return map(memory.data(), memory.mapped_size());
  }

  Result<UcxRegion> pack(ucp_mem_h memh, void* address, std::size_t length) {
    void* rkey = nullptr;
    std::size_t rkey_size = 0;
    ucs_status_t st = ucp_rkey_pack(stack_.context.get(), memh, &rkey, &rkey_size);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_rkey_pack", st));
    UcxRegion region;
    region.address = reinterpret_cast<std::uintptr_t>(address);
    region.length = length;
    region.rkey.assign(static_cast<std::uint8_t*>(rkey), static_cast<std::uint8_t*>(rkey) + rkey_size);
    ucp_rkey_buffer_release(rkey);
    return region;
  }

  Result<UcxRegion> map(void* address, std::size_t length) {
    auto memh = ucx_register(stack_.context.get(), address, length, "a slot");
    if (!memh.ok()) return memh.status();
    memhs_.push_back(*memh);
    return pack(*memh, address, length);
  }

  void progress_loop() {
    try {
      ucp_worker_h worker = stack_.worker.get();
      while (!stopping_) {
        while (ucp_worker_progress(worker) != 0) {
        }
        ucs_status_t st = ucp_worker_arm(worker);
        if (st == UCS_ERR_BUSY) continue;  // more events arrived: progress again
        if (st != UCS_OK) {
          WS_ERROR("publisher: UCX worker cannot sleep ({}); polling", ucs_status_string(st));
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        pollfd fds[2] = {{efd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
        (void)::poll(fds, 2, 100);
      }
    } catch (const std::exception& e) {
      WS_ERROR("publisher: UCX progress thread failed: {}", e.what());
    }
  }

  UcxEndpointStack stack_;
  std::vector<ucp_mem_h> memhs_;
  std::vector<std::uint8_t> offer_;
  int efd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread progress_;
};

}  // namespace

Result<std::unique_ptr<UcxPublisherTransport>> create_ucx_publisher() {
  if (const std::string risk = ucx_emulated_rma_risk(); !risk.empty()) {
    return Status(ErrorCode::kInvalidConfig, risk);
  }
  try {
    auto stack = make_ucx_stack("weightsync-publisher", /*wakeup=*/true);
    if (!stack.ok()) return stack.status();
    return std::unique_ptr<UcxPublisherTransport>(new UcxServer(std::move(*stack)));
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("starting the UCX transport: ") + e.what());
  }
}

TransportInfo probe_ucx() {
  TransportInfo info{"ucx", "UCX one-sided reads (ucp_get); UCX_TLS picks UCX's transports", false, ""};
  if (const std::string risk = ucx_emulated_rma_risk(); !risk.empty()) {
    info.reason = risk;
    return info;
  }
  auto stack = make_ucx_stack("weightsync-probe", false);
  if (!stack.ok()) {
    info.reason = stack.status().message();
    return info;
  }
  info.viable = true;
  if (const char* tls = std::getenv("UCX_TLS")) info.description += " (UCX_TLS=" + std::string(tls) + ")";
  return info;
}

}  // namespace weightsync::detail
