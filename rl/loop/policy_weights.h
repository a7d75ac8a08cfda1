// loop/policy_weights.h: the policy's flat parameter buffer as a weightsync
// layout, so the trainer publishes it and a generator pulls into it with no
// staging copy.
//
// Contract
// - policy_weight_layout(config): one float32 tensor per parameter, in
//   parameter_specs() order, with alignment 4 (no padding): every tensor's
//   offset is its ParamSpec byte_offset and total_bytes() is the size of
//   flat_parameters(). A slot is therefore a byte image of the flat buffer.
// - publish_policy() copies the flat buffer into the Publisher's next slot;
//   a pull through policy_destination() writes the newest version straight
//   into the model's flat buffer (Destination::contiguous over its storage). The layout of
//   both sides must match the model's config; a mismatch is an Error that
//   names both.
// - CUDA models (model.device().is_cuda()): publish_policy_from_device()
//   enqueues the copy of the CUDA buffer into a slot and returns at once
//   (Publisher::publish_from_device); the version commits on the Publisher's
//   thread, and its PublishResult (or error) comes from
//   Publisher::flush_device_publishes(). The buffer must not be written (an
//   optimizer step, a load) until that flush has returned. policy_destination()
//   of a CUDA model is MemoryKind::kCuda, so a pull lands straight in device
//   memory (the library stages through page-locked host chunks when the
//   transport cannot write it). weights_digest() copies a CUDA buffer to the
//   host for hashing (it waits for the kernels queued on libtorch's stream).
// - A narrower dtype in flight (weightsync/narrow.h, trainer --wire-dtype):
//   policy_wire_layout(config, kBFloat16 or kFloat16) is the narrowed form of
//   the policy layout; publish_policy_narrow() hands the float32 buffer to a
//   NarrowingPublisher (one memcpy on the caller's thread; the conversion runs
//   on its converter thread). layout_mismatch() accepts the policy layout and
//   its narrowed forms. PolicyPullTarget is where a generator pulls: the
//   model's buffer for the policy layout, else a host image of the narrow
//   layout (allocated once), widened into the model's buffer by finish()
//   after each successful pull (bit-exact: widen(narrow(x))).
// - Threads: as Publisher::publish() and Subscriber::pull(); no forward or
//   optimizer step may run on the model while a pull writes into it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "policy/model_config.h"
#include "policy/transformer.h"
#include "weightsync/fp8.h"
#include "weightsync/memory.h"
#include "weightsync/narrow.h"
#include "weightsync/publisher.h"
#include "weightsync/subscriber.h"
#include "zorplex/result.h"

namespace loop {

zorplex::Result<weightsync::WeightLayout> policy_weight_layout(const policy::ModelConfig& config);

// The layout a trainer publishes with `wire`: policy_weight_layout() for
// kFloat32, its narrowed form for kBFloat16 / kFloat16, its fp8 form
// (weightsync::fp8_layout, the default rule) for kFloat8E4M3, an Error otherwise.
zorplex::Result<weightsync::WeightLayout> policy_wire_layout(const policy::ModelConfig& config,
                                                             weightsync::DType wire);

// --wire-dtype names: "fp32", "bf16", "fp16", "fp8" (an Error for anything
// else), and back.
zorplex::Result<weightsync::DType> parse_wire_dtype(const std::string& name);
const char* wire_dtype_name(weightsync::DType wire);

// The dtype the policy's float32 parameters travel in under `offered`:
// kFloat8E4M3 when any tensor is e4m3 (the fp8 form keeps some tensors in
// bfloat16), else that of its first tensor (every tensor of a narrowed policy
// layout has the same one).
weightsync::DType offered_wire_dtype(const weightsync::WeightLayout& offered);

// "" when the subscriber's layout is the one the model needs, a narrowed
// form of it (bfloat16 / float16 in flight) or its fp8 form
// (weightsync::check_fp8_pair), else why not.
std::string layout_mismatch(const weightsync::WeightLayout& offered, const policy::ModelConfig& config);

zorplex::Result<weightsync::PublishResult> publish_policy(weightsync::Publisher& publisher,
                                                          std::uint64_t version,
                                                          const policy::Transformer& model);

// Hands the model's float32 buffer (host memory) to `publisher`, whose
// converter publishes its narrow image as `version`.
zorplex::Result<weightsync::NarrowHandoff> publish_policy_narrow(weightsync::NarrowingPublisher& publisher,
                                                                 std::uint64_t version,
                                                                 const policy::Transformer& model);
// The same for an fp8 wire: the converter quantizes (weightsync/fp8.h).
zorplex::Result<weightsync::NarrowHandoff> publish_policy_narrow(weightsync::Fp8Publisher& publisher,
                                                                 std::uint64_t version,
                                                                 const policy::Transformer& model);

// Enqueues a device publish of a CUDA model's buffer, ordered after the work
// queued on cuda_stream (a cudaStream_t; nullptr: the legacy default stream,
// see loop/device.h publish_stream()). An Error for a CPU model.
zorplex::Result<weightsync::PublishTicket> publish_policy_from_device(weightsync::Publisher& publisher,
                                                                      std::uint64_t version,
                                                                      const policy::Transformer& model,
                                                                      void* cuda_stream);

// Destination over the model's flat buffer: host memory, or CUDA memory for a
// model on a CUDA device.
weightsync::Destination policy_destination(const policy::Transformer& model);

// Where a generator's pulls land (see the contract). One per connection;
// keep it while the publisher offers the same layout (the image is
// allocated once, in create()).
class PolicyPullTarget {
 public:
  // An Error when `offered` is neither the model's layout nor a narrowed form.
  static zorplex::Result<std::unique_ptr<PolicyPullTarget>> create(const weightsync::WeightLayout& offered,
                                                                   const policy::Transformer& model);

  const weightsync::WeightLayout& offered() const { return offered_; }
  weightsync::DType wire_dtype() const { return wire_; }
  bool widens() const { return wire_ != weightsync::DType::kFloat32; }
  // The pull's destination: the model's buffer, or the narrow host image.
  weightsync::Destination destination(const policy::Transformer& model);
  // After a successful pull: widens (or, for fp8, dequantizes, scales checked
  // first) the image into the model's buffer (through a host float32 buffer
  // for a CUDA model). Nothing to do without widening.
  zorplex::Result<bool> finish(const policy::Transformer& model);

 private:
  PolicyPullTarget(weightsync::WeightLayout offered, weightsync::WeightLayout wide, weightsync::DType wire)
      : offered_(std::move(offered)), wide_(std::move(wide)), wire_(wire) {}

  weightsync::WeightLayout offered_;
  weightsync::WeightLayout wide_;
  weightsync::DType wire_;
  weightsync::HostBuffer image_;  // the narrow image (widening only)
  torch::Tensor host_wide_;       // CUDA models: widened here, then copied to the device
};

// xxHash3-64 of the flat buffer's bytes as 16 hex digits: the trainer logs it
// for every version it publishes and a generator for every version it pulls,
// so a run's logs prove (or disprove) that both held the same bytes. A CUDA
// buffer is copied to the host first (only for this hash).
std::string weights_digest(const policy::Transformer& model);

}  // namespace loop
