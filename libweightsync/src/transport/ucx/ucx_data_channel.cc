// UCX transport, subscriber side: one endpoint to the publisher's worker in
// peer error-handling mode (where UCX_TLS can detect peer failure).
//
// Two read paths. Direct: when UCX can map every slot into this process
// (ucp_rkey_ptr succeeds: UCX's shared-memory transports with UCX-allocated
// slots), a read is one memcpy from the mapping, like transport/shm. Get:
// otherwise (rc, dc, tcp, ...), destinations are registered with ucp_mem_map
// the first time they are used, or once for a whole region
// (register_region), and kept until release_region (registration_cache.h)
// and reads are ucp_get_nbx in chunks with several requests in flight,
// straight into the destination. Either way the slot's stamp is read after
// the last byte (seqlock check). WEIGHTSYNC_UCX_DIRECT=0 forces the get path.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "common/deadline.h"
#include "common/log.h"
#include "transport/direct_copy.h"
#include "transport/registration_cache.h"
#include "transport/ucx/ucx_handles.h"
#include "transport/ucx/ucx_offer.h"
#include "transport/ucx/ucx_sides.h"

namespace weightsync::detail {
namespace {

constexpr std::uint64_t kChunk = 8u << 20;
constexpr int kInFlight = 8;

struct RkeyDeleter {
  void operator()(ucp_rkey_h k) const { ucp_rkey_destroy(k); }
};
using Rkey = std::unique_ptr<std::remove_pointer_t<ucp_rkey_h>, RkeyDeleter>;

// Completion state of one get, owned by the channel until UCX is done with it.
struct GetSlot {
  std::atomic<bool> done{false};
  ucs_status_t status = UCS_OK;
};

void on_get_done(void* request, ucs_status_t status, void* user_data) {
  auto* slot = static_cast<GetSlot*>(user_data);
  slot->status = status;
  slot->done.store(true, std::memory_order_release);
  ucp_request_free(request);
}

void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<std::atomic<int>*>(arg)->store(static_cast<int>(status));
}

class UcxDataChannel final : public DataChannel {
 public:
  UcxDataChannel(UcxEndpointStack stack, UcxOffer offer)
      : stack_(std::move(stack)), offer_(std::move(offer)), registered_([this](void* base, std::size_t bytes) {
          return register_memory(base, bytes);
        }) {}

  ~UcxDataChannel() override { close(); }

  const char* name() const override { return "ucx"; }
  std::uint64_t registrations() const override { return registered_.registrations(); }
  Status register_region(void* base, std::size_t bytes) override {
    if (!direct_slots_.empty()) return Status();  // direct copies need no registration
    return registered_.add(base, bytes);
  }
  std::size_t release_region(void* base, std::size_t bytes) override { return registered_.release(base, bytes); }
  std::uint64_t released_registrations() const override { return registered_.released(); }
  std::uint64_t registration_generation() const override { return registered_.generation(); }

  Status connect(std::uint64_t slot_bytes, int timeout_ms) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(offer_.worker_address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = on_peer_error;
    params.err_handler.arg = &peer_error_;
    // UCX 1.13's same-host transports cannot detect peer failure: asking for
    // it there only makes UCX log an error before we fall back.
    if (ucx_tls_is_same_host_only()) {
      WS_DEBUG("subscriber: UCX_TLS lists same-host transports only; no UCX peer-failure detection");
      params.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
    }
    ucs_status_t st = ucp_ep_create(stack_.worker.get(), &params, &ep_);
    if (st == UCS_ERR_UNREACHABLE) {
      // Some UCX transports (posix, sysv in UCX 1.13) cannot detect peer
      // failure. Go on without: the control connection and the stall timeout
      // of every read still turn a dead publisher into an error, never a hang.
      WS_INFO("subscriber: UCX cannot detect peer failure with these UCX_TLS; relying on timeouts");
      params.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
      st = ucp_ep_create(stack_.worker.get(), &params, &ep_);
    }
    if (st != UCS_OK) {
      return Status(ErrorCode::kConnectionLost, ucx_error("ucp_ep_create to the publisher", st));
    }
    for (const auto& region : offer_.slots) {
      if (region.length < slot_bytes)
        return Status(ErrorCode::kProtocolError, "ucx offer: slot region too small");
      auto rkey = unpack(region);
      if (!rkey.ok()) return rkey.status();
      slot_rkeys_.push_back(std::move(*rkey));
    }
    if (offer_.stamps.length < offer_.slots.size() * sizeof(std::uint64_t)) {
      return Status(ErrorCode::kProtocolError, "ucx offer: stamp region too small");
    }
    auto stamps = unpack(offer_.stamps);
    if (!stamps.ok()) return stamps.status();
    stamp_rkey_ = std::move(*stamps);
    map_directly(slot_bytes);
    // Complete the wireup now, so a dead publisher shows up at connect time.
    return flush(timeout_ms);
  }

  Result<std::uint64_t> read(const ReadRequest& request) override {
    if (broken_.code() != ErrorCode::kOk) return broken_;
    if (request.slot >= slot_rkeys_.size())
      return Status(ErrorCode::kProtocolError, "lease names a slot out of range");
    if (!direct_slots_.empty()) {
      return copy_mapped_slot(request, direct_slots_[request.slot], slot_bytes_,
                              direct_stamps_ + request.slot);
    }
    // Split the plan into chunks; register each destination piece once.
    struct Chunk {
      char* dest;
      std::uint64_t remote;
      std::size_t length;
      ucp_mem_h memh;
    };
    std::vector<Chunk> chunks;
    const std::uint64_t slot_base = offer_.slots[request.slot].address;
    for (const ReadPiece& piece : *request.plan) {
      if (piece.slot_offset > offer_.slots[request.slot].length ||
          piece.length > offer_.slots[request.slot].length - piece.slot_offset) {
        return Status(ErrorCode::kInternal, "read plan outside the slot");
      }
      auto registered = registered_.covering(piece.dest, piece.length);
      if (!registered.ok()) return registered.status();
      auto* memh = static_cast<ucp_mem_h>(*registered);
      for (std::uint64_t off = 0; off < piece.length; off += kChunk) {
        chunks.push_back(Chunk{static_cast<char*>(piece.dest) + off, slot_base + piece.slot_offset + off,
                               static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, piece.length - off)),
                               memh});
      }
    }
    // Heap-owned: a request UCX never completes keeps its state alive in abandoned_.
    std::vector<std::unique_ptr<GetSlot>> state(chunks.size());
    for (auto& st : state) st = std::make_unique<GetSlot>();
    std::size_t issued = 0, reported = 0;
    Status failure;
    auto last_progress = std::chrono::steady_clock::now();
    while (reported < chunks.size() && failure.ok()) {
      while (issued < chunks.size() && issued - reported < static_cast<std::size_t>(kInFlight)) {
        const Chunk& c = chunks[issued];
        Status s =
            get(c.dest, c.length, c.remote, slot_rkeys_[request.slot].get(), c.memh, state[issued].get());
        ++issued;
        if (!s.ok()) {
          failure = s;
          break;
        }
      }
      const bool progressed = ucp_worker_progress(stack_.worker.get()) != 0;
      // Report completed chunks in plan order (checksums need the order).
      while (reported < issued && state[reported]->done.load(std::memory_order_acquire)) {
        if (state[reported]->status != UCS_OK) {
          failure = Status(ErrorCode::kConnectionLost,
                           ucx_error("ucp_get from the publisher", state[reported]->status));
          break;
        }
        if (request.on_bytes) request.on_bytes(chunks[reported].dest, chunks[reported].length);
        ++reported;
        last_progress = std::chrono::steady_clock::now();
      }
      if (peer_error_.load() != UCS_OK && failure.ok()) {
        failure = Status(
            ErrorCode::kConnectionLost,
            ucx_error("the publisher's UCX endpoint failed", static_cast<ucs_status_t>(peer_error_.load())));
      }
      if (!progressed && failure.ok() && request.peer_alive && liveness_due() && !request.peer_alive()) {
        failure = Status(ErrorCode::kConnectionLost,
                         "the publisher closed its control connection during a UCX read (did it die?)");
      }
      if (failure.ok() &&
          std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(request.stall_ms)) {
        failure =
            Status(ErrorCode::kTimeout, "timed out reading from the publisher over UCX (no progress for " +
                                            std::to_string(request.stall_ms) + " ms)");
      }
    }
    if (!failure.ok()) {
      fail(failure, state, issued);
      return failure;
    }
    // Seqlock: the stamp is read only after every data get completed.
    std::vector<std::unique_ptr<GetSlot>> stamp_state;
    stamp_state.push_back(std::make_unique<GetSlot>());
    auto stamp = std::make_unique<std::uint64_t>(0);  // heap: an abandoned get may still land in it
    Status s =
        get(stamp.get(), sizeof(std::uint64_t), offer_.stamps.address + request.slot * sizeof(std::uint64_t),
            stamp_rkey_.get(), nullptr, stamp_state[0].get());
    if (s.ok()) s = wait(*stamp_state[0], request.stall_ms, request.peer_alive, "the slot's stamp");
    if (!s.ok()) {
      abandoned_stamps_.push_back(std::move(stamp));
      fail(s, stamp_state, 1);
      return s;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    return *stamp;
  }

  void close() override {
    close_endpoint_only();
    registered_.clear();
  }

 private:
  // Direct access when UCX can map every slot and the stamps here.
  void map_directly(std::uint64_t slot_bytes) {
    const char* setting = std::getenv("WEIGHTSYNC_UCX_DIRECT");
    if (setting != nullptr && std::string(setting) == "0") {
      WS_DEBUG("subscriber: WEIGHTSYNC_UCX_DIRECT=0: reading with ucp_get_nbx");
      return;
    }
    std::vector<const char*> slots;
    for (std::size_t i = 0; i < slot_rkeys_.size(); ++i) {
      void* p = nullptr;
      if (ucp_rkey_ptr(slot_rkeys_[i].get(), offer_.slots[i].address, &p) != UCS_OK || p == nullptr) return;
      slots.push_back(static_cast<const char*>(p));
    }
    void* stamps = nullptr;
    if (ucp_rkey_ptr(stamp_rkey_.get(), offer_.stamps.address, &stamps) != UCS_OK || stamps == nullptr)
      return;
    if (reinterpret_cast<std::uintptr_t>(stamps) % alignof(std::atomic<std::uint64_t>) != 0) return;
    direct_slots_ = std::move(slots);
    direct_stamps_ = static_cast<const std::atomic<std::uint64_t>*>(stamps);
    slot_bytes_ = slot_bytes;
    WS_DEBUG("subscriber: UCX maps the publisher's slots here (ucp_rkey_ptr): reads are direct copies");
  }

  Result<Rkey> unpack(const UcxRegion& region) {
    ucp_rkey_h rkey = nullptr;
    ucs_status_t st = ucp_ep_rkey_unpack(ep_, region.rkey.data(), &rkey);
    if (st != UCS_OK) return Status(ErrorCode::kProtocolError, ucx_error("ucp_ep_rkey_unpack", st));
    return Rkey(rkey);
  }

  // A ucp_mem_map registration, unmapped when its last owner goes.
  Result<RegistrationCache::Registration> register_memory(void* base, std::size_t bytes) {
    auto memh = ucx_register(stack_.context.get(), base, bytes, "the destination");
    if (!memh.ok()) return memh.status();
    ucp_context_h context = stack_.context.get();
    ucp_mem_h handle = *memh;
    return RegistrationCache::Registration{
        handle, std::shared_ptr<void>(handle, [context](void* h) { ucp_mem_unmap(context, static_cast<ucp_mem_h>(h)); })};
  }

  Status get(void* dest, std::size_t length, std::uint64_t remote, ucp_rkey_h rkey, ucp_mem_h memh,
             GetSlot* slot) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_get_done;
    param.user_data = slot;
    if (memh != nullptr) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = memh;
    }
    ucs_status_ptr_t req = ucp_get_nbx(ep_, dest, length, remote, rkey, &param);
    if (req == nullptr) {
      slot->done.store(true);
      return Status();
    }
    if (UCS_PTR_IS_ERR(req)) {
      slot->done.store(true);
      return Status(ErrorCode::kConnectionLost, ucx_error("ucp_get_nbx", UCS_PTR_STATUS(req)));
    }
    return Status();
  }

  // True at most every 50 ms: how often a stalled read asks whether the publisher is alive.
  bool liveness_due() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_liveness_check_ < std::chrono::milliseconds(50)) return false;
    last_liveness_check_ = now;
    return true;
  }

  Status wait(GetSlot& slot, int stall_ms, const std::function<bool()>& peer_alive, const char* what) {
    const Deadline deadline = Deadline::after(std::chrono::milliseconds(stall_ms));
    while (!slot.done.load(std::memory_order_acquire)) {
      if (ucp_worker_progress(stack_.worker.get()) != 0) continue;
      if (deadline.expired())
        return Status(ErrorCode::kTimeout, std::string("timed out reading ") + what + " over UCX");
      if (peer_error_.load() != UCS_OK)
        return Status(ErrorCode::kConnectionLost, "the publisher's UCX endpoint failed");
      if (peer_alive && liveness_due() && !peer_alive()) {
        return Status(ErrorCode::kConnectionLost,
                      "the publisher closed its control connection (did it die?)");
      }
    }
    if (slot.status != UCS_OK) return Status(ErrorCode::kConnectionLost, ucx_error("ucp_get", slot.status));
    return Status();
  }

  Status flush(int timeout_ms) {
    ucp_request_param_t param{};
    std::vector<std::unique_ptr<GetSlot>> done;
    done.push_back(std::make_unique<GetSlot>());
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_get_done;
    param.user_data = done[0].get();
    ucs_status_ptr_t req = ucp_ep_flush_nbx(ep_, &param);
    if (req == nullptr) return Status();
    if (UCS_PTR_IS_ERR(req)) {
      return Status(ErrorCode::kConnectionLost,
                    ucx_error("connecting to the publisher over UCX", UCS_PTR_STATUS(req)));
    }
    Status s = wait(*done[0], timeout_ms, nullptr, "the publisher's UCX address");
    if (!s.ok()) fail(s, done, 1);
    return s;
  }

  // After a failure: close the endpoint by force (pending requests complete
  // with an error) and give them a moment. A request UCX has not completed by
  // then keeps its state in abandoned_ until the worker is destroyed. Requests
  // only ever run inside ucp_worker_progress on this thread, and a broken
  // channel never progresses again, so nothing lands in caller memory later.
  void fail(const Status& why, std::vector<std::unique_ptr<GetSlot>>& state, std::size_t issued) {
    broken_ = why;
    close_endpoint_only();
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    for (std::size_t i = 0; i < issued; ++i) {
      while (!state[i]->done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
        ucp_worker_progress(stack_.worker.get());
      }
      if (!state[i]->done.load(std::memory_order_acquire)) abandoned_.push_back(std::move(state[i]));
    }
  }

  void close_endpoint_only() {
    if (ep_ == nullptr) return;
    direct_slots_.clear();
    direct_stamps_ = nullptr;
    slot_rkeys_.clear();
    stamp_rkey_.reset();
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep_, &param);
    if (UCS_PTR_IS_PTR(req)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
        ucp_worker_progress(stack_.worker.get());
      }
      ucp_request_free(req);  // released by UCX when it completes
    }
    ep_ = nullptr;
  }

  // Declared first, destroyed last: outlives the worker, whose destruction
  // may still complete abandoned requests.
  std::vector<std::unique_ptr<GetSlot>> abandoned_;
  std::vector<std::unique_ptr<std::uint64_t>> abandoned_stamps_;
  UcxEndpointStack stack_;
  UcxOffer offer_;
  ucp_ep_h ep_ = nullptr;
  std::vector<Rkey> slot_rkeys_;
  Rkey stamp_rkey_;
  // Set when UCX maps the slots into this process (valid while the rkeys live).
  std::vector<const char*> direct_slots_;
  const std::atomic<std::uint64_t>* direct_stamps_ = nullptr;
  std::uint64_t slot_bytes_ = 0;
  RegistrationCache registered_;  // destroyed before stack_: unmapped while the context lives
  std::atomic<int> peer_error_{UCS_OK};
  Status broken_;
  std::chrono::steady_clock::time_point last_liveness_check_{};
};

}  // namespace

Result<std::unique_ptr<DataChannel>> open_ucx_data_channel(const std::vector<std::uint8_t>& blob,
                                                           std::uint32_t slot_count, std::uint64_t slot_bytes,
                                                           int connect_timeout_ms) {
  try {
    auto offer = UcxOffer::decode(blob);
    if (!offer.ok()) return offer.status();
    if (offer->slots.size() != slot_count)
      return Status(ErrorCode::kProtocolError, "ucx offer: wrong slot count");
    auto stack = make_ucx_stack("weightsync-subscriber", UcxRole::kSubscriber);
    if (!stack.ok()) return stack.status();
    auto channel = std::make_unique<UcxDataChannel>(std::move(*stack), std::move(*offer));
    Status s = channel->connect(slot_bytes, connect_timeout_ms);
    if (!s.ok()) return s;
    return std::unique_ptr<DataChannel>(std::move(channel));
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("opening the UCX transport: ") + e.what());
  }
}

}  // namespace weightsync::detail
