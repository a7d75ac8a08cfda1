// UCX transport, publisher side: every slot and the stamp page are mapped
// with ucp_mem_map once, here (or allocated by UCX, with
// WEIGHTSYNC_SLOT_ALLOCATOR=ucx), and their rkeys packed into the offer. A
// progress thread drives the worker (connection wireup needs the target to
// progress), sleeping on the worker's event fd. Without the insecure override
// the worker has no RMA feature (UCX's emulated gets and puts, which reach
// any address, are never served) and the offer exists only when UCX reaches
// every region natively (verify_native()).
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "transport/ucx/ucx_handles.h"
#include "transport/ucx/ucx_offer.h"
#include "transport/ucx/ucx_sides.h"

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
  // Zero-fill as the contract says; this also faults every page in now, not
  // during the first publish.
  std::memset(attr.address, 0, mapped);
  // One owner of memh, made once the lock state is known: a second owner
  // (an unlocked one replaced by a locked one) would unmap memh when the
  // first is destroyed and leave the second with freed memory.
  const bool locked = lock && ::mlock(attr.address, mapped) == 0;
  const int lock_error = lock && !locked ? errno : 0;
  auto memory = std::make_unique<UcxSlotMemory>(context, memh, attr.address, bytes, mapped, locked);
  if (lock && !locked) {
    return Status(ErrorCode::kInvalidConfig,
                  "cannot lock " + std::to_string(mapped) + " bytes in RAM (" + std::strerror(lock_error) +
                      "); raise RLIMIT_MEMLOCK (ulimit -l) or set lock_memory = false");
  }
  return std::unique_ptr<SlotMemory>(std::move(memory));
}

class UcxServer final : public ServedTransport {
 public:
  explicit UcxServer(UcxEndpointStack stack) : stack_(std::move(stack)), insecure_(ucx_insecure_override()) {}

  ~UcxServer() override {
    stopping_ = true;
    if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
    if (progress_.joinable()) progress_.join();
    for (ucp_mem_h memh : memhs_) ucp_mem_unmap(stack_.context.get(), memh);
    for (int fd : wake_) {
      if (fd >= 0) ::close(fd);
    }
  }

  const char* name() const override { return "ucx"; }

  std::optional<SlotAllocator> slot_allocator(bool lock_memory) override {
    WS_WARN(
        "publisher: slot allocator 'ucx': every ucx subscriber is trusted with write access to the slots and "
        "stamps (UCX maps them read-write), so any one of them can change what the others pull");
    UcxContext context = stack_.context;
    return SlotAllocator{"ucx", [context, lock_memory](std::size_t bytes, const char*) {
                           return allocate_with_ucx(context, bytes, lock_memory);
                         }};
  }

  Status start(SlotRing& ring) override {
    if (!insecure_ && !allocated_here(ring)) {
      // UCX 1.13 registers memory for remote write as well as read
      // (ucp_mem_map ignores UCP_MEM_MAP_PARAM_FIELD_PROT), and its
      // shared-memory transports cannot serve registered memory natively.
      return Status(ErrorCode::kInvalidConfig,
                    "the slots are not UCX's own: UCX would serve them only through its software emulation "
                    "(which reads and writes any address of this process) or registered for remote write; "
                    "local subscribers use the shm transport (sealed, read-only). Only "
                    "WEIGHTSYNC_SLOT_ALLOCATOR=ucx, which trusts every subscriber with write access to the "
                    "slots, offers ucx");
    }
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
    if (!insecure_) {
      if (Status native = verify_native(offer); !native.ok()) return native;
    }
    return Status::ok_status();
  }

  const std::vector<std::uint8_t>& offer() const override { return offer_; }

 private:
  bool allocated_here(const SlotRing& ring) const {
    auto own = [this](const SlotMemory& memory) {
      const auto* ucx = dynamic_cast<const UcxSlotMemory*>(&memory);
      return ucx != nullptr && ucx->context() == stack_.context.get();
    };
    for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
      if (!own(ring.slot_region(i))) return false;
    }
    return own(ring.stamp_region());
  }

  // Asks UCX, from a probe endpoint in this process, whether every region of
  // the offer is reachable natively: UCX maps it (ucp_rkey_ptr), or an 8-byte
  // get completes. This worker has no RMA feature, so a get UCX would
  // emulate is never answered and the region is not offered.
  Status verify_native(const UcxOffer& offer) {
    auto probe = make_ucx_stack("weightsync-publisher-probe", UcxRole::kSubscriber);
    if (!probe.ok()) return probe.status();
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(offer.worker_address.data());
    ucp_ep_h ep = nullptr;
    ucs_status_t st = ucp_ep_create(probe->worker.get(), &params, &ep);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("probing UCX: ucp_ep_create", st));
    std::vector<const UcxRegion*> regions;
    for (const auto& r : offer.slots) regions.push_back(&r);
    regions.push_back(&offer.stamps);
    Status verdict;
    for (std::size_t i = 0; i < regions.size() && verdict.ok(); ++i) {
      const std::string what = i + 1 < regions.size() ? "slot " + std::to_string(i) : "the stamp page";
      ucp_rkey_h rkey = nullptr;
      st = ucp_ep_rkey_unpack(ep, regions[i]->rkey.data(), &rkey);
      if (st != UCS_OK) {
        verdict =
            Status(ErrorCode::kInvalidConfig, ucx_error("probing UCX: unpacking the rkey of " + what, st));
        break;
      }
      void* mapped = nullptr;
      if (ucp_rkey_ptr(rkey, regions[i]->address, &mapped) != UCS_OK || mapped == nullptr) {
        verdict = probe_get(probe->worker.get(), ep, rkey, regions[i]->address, what);
      }
      ucp_rkey_destroy(rkey);
    }
    ucp_request_param_t close{};
    close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &close);
    if (UCS_PTR_IS_PTR(req)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
        ucp_worker_progress(probe->worker.get());
      }
      ucp_request_free(req);
    }
    return verdict;
  }

  static void on_probe_done(void* request, ucs_status_t status, void* user_data) {
    static_cast<std::atomic<int>*>(user_data)->store(static_cast<int>(status));
    ucp_request_free(request);
  }

  // One 8-byte get at the start of a region, bounded to 2 s. A request still
  // pending then is left to the probe worker's destruction, with its state
  // kept in probe_states_ (it outlives the probe stack).
  Status probe_get(ucp_worker_h worker, ucp_ep_h ep, ucp_rkey_h rkey, std::uint64_t address,
                   const std::string& what) {
    probe_states_.push_back(std::make_unique<ProbeState>());
    ProbeState& state = *probe_states_.back();
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_probe_done;
    param.user_data = &state.status;
    ucs_status_ptr_t req = ucp_get_nbx(ep, &state.word, sizeof(state.word), address, rkey, &param);
    if (req == nullptr) return Status();
    if (UCS_PTR_IS_ERR(req)) {
      return Status(ErrorCode::kInvalidConfig,
                    ucx_error("probing UCX: ucp_get_nbx of " + what, UCS_PTR_STATUS(req)));
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (state.status.load() == kProbePending && std::chrono::steady_clock::now() < until) {
      if (ucp_worker_progress(worker) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const int status = state.status.load();
    if (status == kProbePending) {
      return Status(
          ErrorCode::kInvalidConfig,
          "UCX cannot read " + what +
              " natively with these UCX transports (a get needs the "
              "publisher's CPU, i.e. UCX's software emulation, which this publisher does not serve)");
    }
    if (status != UCS_OK) {
      return Status(ErrorCode::kInvalidConfig,
                    ucx_error("probing UCX: reading " + what, static_cast<ucs_status_t>(status)));
    }
    return Status();
  }

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

  static constexpr int kProbePending = 1;  // not a ucs_status_t UCX reports
  struct ProbeState {
    std::atomic<int> status{kProbePending};
    std::uint64_t word = 0;
  };
  // Declared first: outlives every probe worker (see probe_get()).
  std::vector<std::unique_ptr<ProbeState>> probe_states_;
  UcxEndpointStack stack_;
  const bool insecure_;
  std::vector<ucp_mem_h> memhs_;
  std::vector<std::uint8_t> offer_;
  int efd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread progress_;
};

}  // namespace

Result<std::unique_ptr<ServedTransport>> create_ucx_publisher(bool loopback_only) {
  try {
    auto stack = make_ucx_stack("weightsync-publisher", UcxRole::kPublisher, loopback_only);
    if (!stack.ok()) return stack.status();
    return std::unique_ptr<ServedTransport>(new UcxServer(std::move(*stack)));
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("starting the UCX transport: ") + e.what());
  }
}

TransportInfo probe_ucx() {
  TransportInfo info{"ucx", "UCX one-sided reads (ucp_get); UCX_TLS picks UCX's transports", false, ""};
  auto stack = make_ucx_stack("weightsync-probe", UcxRole::kSubscriber);
  if (!stack.ok()) {
    info.reason = stack.status().message();
    return info;
  }
  info.viable = true;
  if (const char* tls = std::getenv("UCX_TLS")) info.description += " (UCX_TLS=" + std::string(tls) + ")";
  return info;
}

}  // namespace weightsync::detail
