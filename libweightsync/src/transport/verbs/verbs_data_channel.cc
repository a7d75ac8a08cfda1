// ibverbs transport, subscriber side: an RC queue pair connected over the
// control plane; each pull posts RDMA READs (8 MiB each, up to 16 in flight)
// straight into the destination, registered on first use or once per region
// (register_region) until release_region (registration_cache.h), then one
// 8-byte READ of the slot's stamp after the data READs completed. Work
// completion errors map to kConnectionLost (the publisher or the fabric is
// gone) or kProtocolError (it refused the access: a bad rkey or range).
#include <map>

#include "common/deadline.h"
#include "common/random.h"
#include "transport/registration_cache.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_sides.h"

namespace weightsync::detail {
namespace {

constexpr int kMaxReads = 16;
constexpr std::uint64_t kChunk = 8u << 20;

Status completion_error(const ibv_wc& wc) {
  const std::string what = std::string("RDMA READ failed: ") + ibv_wc_status_str(wc.status);
  switch (wc.status) {
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_LOC_PROT_ERR:
      return Status(ErrorCode::kProtocolError, what + " (the publisher refused the access)");
    default: return Status(ErrorCode::kConnectionLost, what + " (publisher or fabric unreachable)");
  }
}

class VerbsDataChannel final : public DataChannel {
 public:
  VerbsDataChannel(VerbsDevice device, VerbsOffer offer)
      : device_(std::move(device)), offer_(std::move(offer)), mrs_([this](void* base, std::size_t bytes) {
          return register_memory(base, bytes);
        }) {}

  const char* name() const override { return "verbs"; }
  std::uint64_t registrations() const override { return mrs_.registrations(); }
  Status register_region(void* base, std::size_t bytes) override { return mrs_.add(base, bytes); }
  std::size_t release_region(void* base, std::size_t bytes) override { return mrs_.release(base, bytes); }
  std::uint64_t released_registrations() const override { return mrs_.released(); }
  std::uint64_t registration_generation() const override { return mrs_.generation(); }

  Status connect(const TransportExchange& exchange) {
    cq_.reset(ibv_create_cq(device_.context.get(), kMaxReads + 1, nullptr, nullptr, 0));
    if (!cq_) return Status(ErrorCode::kInvalidConfig, "ibv_create_cq failed");
    auto qp = create_rc_qp(device_, cq_.get(), kMaxReads);
    if (!qp.ok()) return qp.status();
    qp_ = std::move(*qp);
    std::uint32_t psn = 0;
    Status s = random_bytes(&psn, sizeof(psn));
    if (!s.ok()) return s;
    psn &= 0xffffff;
    auto reply = exchange("verbs", local_endpoint(device_, qp_.get(), psn).encode());
    if (!reply.ok()) return reply.status();
    auto remote = VerbsEndpoint::decode(*reply);
    if (!remote.ok()) return remote.status();
    s = connect_rc_qp(device_, qp_.get(), psn, *remote, /*allow_remote_read=*/false, kMaxReads);
    if (!s.ok()) return s;
    stamp_mr_.reset(ibv_reg_mr(device_.pd.get(), &stamp_, sizeof(stamp_), IBV_ACCESS_LOCAL_WRITE));
    if (!stamp_mr_) return Status(ErrorCode::kInvalidConfig, "ibv_reg_mr of the stamp buffer failed");
    return Status();
  }

  Result<std::uint64_t> read(const ReadRequest& request) override {
    if (!broken_.ok()) return broken_;
    if (request.slot >= offer_.slots.size())
      return Status(ErrorCode::kProtocolError, "lease names a slot out of range");
    const VerbsRegion& slot = offer_.slots[request.slot];
    struct Chunk {
      char* dest;
      std::uint64_t remote;
      std::uint32_t length;
      std::uint32_t lkey;
    };
    std::vector<Chunk> chunks;
    for (const ReadPiece& piece : *request.plan) {
      if (piece.slot_offset > slot.length || piece.length > slot.length - piece.slot_offset) {
        return Status(ErrorCode::kInternal, "read plan outside the slot");
      }
      auto registered = mrs_.covering(piece.dest, piece.length);
      if (!registered.ok()) return registered.status();
      const std::uint32_t lkey = static_cast<ibv_mr*>(*registered)->lkey;
      for (std::uint64_t off = 0; off < piece.length; off += kChunk) {
        chunks.push_back(Chunk{
            static_cast<char*>(piece.dest) + off, slot.address + piece.slot_offset + off,
            static_cast<std::uint32_t>(std::min<std::uint64_t>(kChunk, piece.length - off)), lkey});
      }
    }
    std::size_t posted = 0, completed = 0;
    while (completed < chunks.size()) {
      while (posted < chunks.size() && posted - completed < static_cast<std::size_t>(kMaxReads)) {
        const Chunk& c = chunks[posted];
        Status s = post_read(c.dest, c.length, c.lkey, c.remote, slot.rkey, posted);
        if (!s.ok()) return fail(s);
        ++posted;
      }
      // Completions arrive in posting order on an RC queue pair.
      auto done = poll_one(request.stall_ms, request.peer_alive);
      if (!done.ok()) return fail(done.status());
      if (request.on_bytes) request.on_bytes(chunks[completed].dest, chunks[completed].length);
      ++completed;
    }
    Status s =
        post_read(&stamp_, sizeof(stamp_), stamp_mr_->lkey,
                  offer_.stamps.address + request.slot * sizeof(std::uint64_t), offer_.stamps.rkey, ~0ull);
    if (!s.ok()) return fail(s);
    auto done = poll_one(request.stall_ms, request.peer_alive);
    if (!done.ok()) return fail(done.status());
    return stamp_;
  }

  void close() override {}

 private:
  // An ibv_reg_mr registration, deregistered when its last owner goes.
  Result<RegistrationCache::Registration> register_memory(void* base, std::size_t bytes) {
    ibv_mr* mr = ibv_reg_mr(device_.pd.get(), base, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr)
      return Status(ErrorCode::kInvalidConfig, "ibv_reg_mr of the destination failed (raise ulimit -l?)");
    return RegistrationCache::Registration{mr, std::shared_ptr<void>(mr, [](void* m) {
                                             ibv_dereg_mr(static_cast<ibv_mr*>(m));
                                           })};
  }

  Status post_read(void* dest, std::uint32_t length, std::uint32_t lkey, std::uint64_t remote,
                   std::uint32_t rkey, std::uint64_t id) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(dest), length, lkey};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(qp_.get(), &wr, &bad) != 0) {
      return Status(ErrorCode::kConnectionLost, "ibv_post_send failed (queue pair in error state?)");
    }
    return Status();
  }

  Result<ibv_wc> poll_one(int stall_ms, const std::function<bool()>& peer_alive) {
    const Deadline deadline = Deadline::after(std::chrono::milliseconds(stall_ms));
    auto next_liveness = std::chrono::steady_clock::now();
    for (;;) {
      ibv_wc wc{};
      int n = ibv_poll_cq(cq_.get(), 1, &wc);
      if (n < 0) return Status(ErrorCode::kConnectionLost, "ibv_poll_cq failed");
      if (n == 1) {
        if (wc.status != IBV_WC_SUCCESS) return completion_error(wc);
        return wc;
      }
      if (deadline.expired())
        return Status(ErrorCode::kTimeout, "timed out waiting for an RDMA READ to complete");
      if (peer_alive && std::chrono::steady_clock::now() >= next_liveness) {
        if (!peer_alive()) {
          return Status(ErrorCode::kConnectionLost,
                        "the publisher closed its control connection (did it die?)");
        }
        next_liveness = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      }
    }
  }

  // After a failure the queue pair is moved to the error state, which flushes
  // every outstanding READ: none can land in caller memory afterwards.
  Status fail(const Status& why) {
    broken_ = why;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_.get(), &attr, IBV_QP_STATE);
    ibv_wc wc[kMaxReads];
    const Deadline deadline = Deadline::after(std::chrono::milliseconds(1000));
    while (!deadline.expired() && ibv_poll_cq(cq_.get(), kMaxReads, wc) >= 0) {
      ibv_qp_attr out{};
      ibv_qp_init_attr init{};
      if (ibv_query_qp(qp_.get(), &out, IBV_QP_STATE, &init) == 0 && out.qp_state == IBV_QPS_ERR &&
          ibv_poll_cq(cq_.get(), kMaxReads, wc) == 0) {
        break;
      }
    }
    return why;
  }

  VerbsDevice device_;  // destroyed last
  VerbsOffer offer_;
  IbvCq cq_;
  RegistrationCache mrs_;  // destroyed before device_: deregistered while the PD lives
  std::uint64_t stamp_ = 0;
  IbvMr stamp_mr_;
  IbvQp qp_;  // destroyed first
  Status broken_;
};

}  // namespace

Result<std::unique_ptr<DataChannel>> open_verbs_data_channel(const std::vector<std::uint8_t>& blob,
                                                             std::uint32_t slot_count,
                                                             std::uint64_t slot_bytes,
                                                             const TransportExchange& exchange) {
  try {
    auto offer = VerbsOffer::decode(blob);
    if (!offer.ok()) return offer.status();
    if (offer->slots.size() != slot_count)
      return Status(ErrorCode::kProtocolError, "verbs offer: wrong slot count");
    for (const auto& s : offer->slots) {
      if (s.length < slot_bytes)
        return Status(ErrorCode::kProtocolError, "verbs offer: slot region too small");
    }
    if (offer->stamps.length < slot_count * sizeof(std::uint64_t)) {
      return Status(ErrorCode::kProtocolError, "verbs offer: stamp region too small");
    }
    auto device = open_verbs_device();
    if (!device.ok()) return device.status();
    auto channel = std::make_unique<VerbsDataChannel>(std::move(*device), std::move(*offer));
    Status s = channel->connect(exchange);
    if (!s.ok()) return s;
    return std::unique_ptr<DataChannel>(std::move(channel));
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("opening the verbs transport: ") + e.what());
  }
}

}  // namespace weightsync::detail
