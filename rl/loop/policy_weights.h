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
// - Threads: as Publisher::publish() and Subscriber::pull(); no forward or
//   optimizer step may run on the model while a pull writes into it.
#pragma once

#include <cstdint>
#include <string>

#include "policy/model_config.h"
#include "policy/transformer.h"
#include "weightsync/publisher.h"
#include "weightsync/subscriber.h"
#include "zorplex/result.h"

namespace loop {

zorplex::Result<weightsync::WeightLayout> policy_weight_layout(const policy::ModelConfig& config);

// "" when the subscriber's layout is the one the model needs, else why not.
std::string layout_mismatch(const weightsync::WeightLayout& offered, const policy::ModelConfig& config);

zorplex::Result<weightsync::PublishResult> publish_policy(weightsync::Publisher& publisher,
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

// xxHash3-64 of the flat buffer's bytes as 16 hex digits: the trainer logs it
// for every version it publishes and a generator for every version it pulls,
// so a run's logs prove (or disprove) that both held the same bytes. A CUDA
// buffer is copied to the host first (only for this hash).
std::string weights_digest(const policy::Transformer& model);

}  // namespace loop
