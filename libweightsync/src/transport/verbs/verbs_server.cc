// ibverbs transport, publisher side: the target of RDMA READs. Slots and the
// stamp page are registered (IBV_ACCESS_REMOTE_READ only) once at start; each
// subscriber session gets its own RC queue pair on TRANSPORT_CONNECT, which
// is destroyed when the session ends. The publisher's CPU takes no part in a
// read: the NIC serves it.
#include <map>
#include <mutex>

#include "common/random.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_sides.h"

namespace weightsync::detail {
namespace {

constexpr int kMaxReads = 16;

class VerbsServer final : public ServedTransport {
 public:
  const char* name() const override { return "verbs"; }
  const std::vector<std::uint8_t>& offer() const override { return offer_; }

  Status start(SlotRing& ring) override try {
    auto device = open_verbs_device();
    if (!device.ok()) return device.status();
    device_ = std::move(*device);
    cq_.reset(ibv_create_cq(device_.context.get(), 1, nullptr, nullptr, 0));
    if (!cq_) return Status(ErrorCode::kInvalidConfig, "ibv_create_cq failed");
    VerbsOffer offer;
    for (std::uint32_t i = 0; i < ring.slot_count(); ++i) {
      auto region = register_region(ring.slot_region(i));
      if (!region.ok()) return region.status();
      offer.slots.push_back(*region);
    }
    auto stamps = register_region(ring.stamp_region());
    if (!stamps.ok()) return stamps.status();
    offer.stamps = *stamps;
    offer_ = offer.encode();
    return Status();
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("starting the verbs transport: ") + e.what());
  }

  Result<std::vector<std::uint8_t>> connect(std::uint64_t session,
                                            const std::vector<std::uint8_t>& blob) override {
    auto remote = VerbsEndpoint::decode(blob);
    if (!remote.ok()) return remote.status();
    std::lock_guard<std::mutex> lock(mu_);
    if (qps_.count(session) != 0)
      return Status(ErrorCode::kInvalidArgument, "this session is already connected");
    auto qp = create_rc_qp(device_, cq_.get(), kMaxReads);
    if (!qp.ok()) return qp.status();
    std::uint32_t psn = 0;
    Status s = random_bytes(&psn, sizeof(psn));
    if (!s.ok()) return s;
    psn &= 0xffffff;
    s = connect_rc_qp(device_, qp->get(), psn, *remote, /*allow_remote_read=*/true, kMaxReads);
    if (!s.ok()) return s;
    auto local = local_endpoint(device_, qp->get(), psn).encode();
    qps_.emplace(session, std::move(*qp));
    return local;
  }

  void session_closed(std::uint64_t session) override {
    std::lock_guard<std::mutex> lock(mu_);
    qps_.erase(session);
  }

 private:
  Result<VerbsRegion> register_region(const SlotMemory& region) {
    IbvMr mr(ibv_reg_mr(device_.pd.get(), region.data(), region.mapped_size(), IBV_ACCESS_REMOTE_READ));
    if (!mr) return Status(ErrorCode::kInvalidConfig, "ibv_reg_mr of a slot failed (raise ulimit -l?)");
    VerbsRegion out{reinterpret_cast<std::uintptr_t>(region.data()), region.mapped_size(), mr->rkey};
    mrs_.push_back(std::move(mr));
    return out;
  }

  VerbsDevice device_;  // destroyed last
  IbvCq cq_;
  std::vector<IbvMr> mrs_;
  std::mutex mu_;
  std::map<std::uint64_t, IbvQp> qps_;  // destroyed first
  std::vector<std::uint8_t> offer_;
};

}  // namespace

std::unique_ptr<ServedTransport> make_verbs_server() {
  return std::make_unique<VerbsServer>();
}

TransportInfo probe_verbs() {
  TransportInfo info{"verbs", "ibverbs RDMA READ over RC queue pairs (InfiniBand, RoCE)", false, ""};
  auto device = open_verbs_device();
  if (!device.ok()) {
    info.reason = device.status().message();
    return info;
  }
  info.viable = true;
  info.description += " on " + device->name;
  return info;
}

}  // namespace weightsync::detail
