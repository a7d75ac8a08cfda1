// UCX transport, publisher side: every slot and the stamp page are mapped
// with ucp_mem_map once, here, and their rkeys packed into the offer. A
// progress thread drives the worker (UCX's tcp transport and connection
// wireup need the target to progress), sleeping on the worker's event fd.
#include <fcntl.h>
#include <poll.h>
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

class UcxServer final : public UcxPublisherTransport {
 public:
  ~UcxServer() override {
    stopping_ = true;
    if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
    if (progress_.joinable()) progress_.join();
    for (ucp_mem_h memh : memhs_) ucp_mem_unmap(stack_.context.get(), memh);
    for (int fd : wake_) {
      if (fd >= 0) ::close(fd);
    }
  }

  const std::vector<std::uint8_t>& offer() const override { return offer_; }

  static Result<std::unique_ptr<UcxPublisherTransport>> start(const SlotRing& ring) {
    auto stack = make_ucx_stack("weightsync-publisher", /*wakeup=*/true);
    if (!stack.ok()) return stack.status();
    std::unique_ptr<UcxServer> server(new UcxServer(std::move(*stack)));
    UcxOffer offer;
    for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
      const SharedRegion& r = ring.slot_region(i);
      auto region = server->map(const_cast<void*>(r.data()), r.mapped_size());
      if (!region.ok()) return region.status();
      offer.slots.push_back(std::move(*region));
    }
    auto stamps =
        server->map(const_cast<void*>(ring.stamp_region().data()), ring.stamp_region().mapped_size());
    if (!stamps.ok()) return stamps.status();
    offer.stamps = std::move(*stamps);
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    ucs_status_t st = ucp_worker_get_address(server->stack_.worker.get(), &address, &length);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_worker_get_address", st));
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(address);
    offer.worker_address.assign(bytes, bytes + length);
    ucp_worker_release_address(server->stack_.worker.get(), address);
    server->offer_ = offer.encode();
    st = ucp_worker_get_efd(server->stack_.worker.get(), &server->efd_);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_worker_get_efd", st));
    if (::pipe2(server->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      return Status(ErrorCode::kInternal, std::string("pipe2: ") + std::strerror(errno));
    }
    server->progress_ = std::thread([s = server.get()] { s->progress_loop(); });
    return std::unique_ptr<UcxPublisherTransport>(std::move(server));
  }

 private:
  explicit UcxServer(UcxEndpointStack stack) : stack_(std::move(stack)) {}

  Result<UcxRegion> map(void* address, std::size_t length) {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = address;
    params.length = length;
    ucp_mem_h memh = nullptr;
    ucs_status_t st = ucp_mem_map(stack_.context.get(), &params, &memh);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_mem_map of a slot", st));
    memhs_.push_back(memh);
    void* rkey = nullptr;
    std::size_t rkey_size = 0;
    st = ucp_rkey_pack(stack_.context.get(), memh, &rkey, &rkey_size);
    if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_rkey_pack", st));
    UcxRegion region;
    region.address = reinterpret_cast<std::uintptr_t>(address);
    region.length = length;
    region.rkey.assign(static_cast<std::uint8_t*>(rkey), static_cast<std::uint8_t*>(rkey) + rkey_size);
    ucp_rkey_buffer_release(rkey);
    return region;
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

Result<std::unique_ptr<UcxPublisherTransport>> start_ucx_publisher(const SlotRing& ring) {
  if (const std::string risk = ucx_emulated_rma_risk(); !risk.empty()) {
    return Status(ErrorCode::kInvalidConfig, risk);
  }
  try {
    return UcxServer::start(ring);
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
