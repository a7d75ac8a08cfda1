#include "loop/policy_weights.h"

#include <xxhash.h>

#include <cstdio>
#include <utility>
#include <vector>

namespace loop {

zorplex::Result<weightsync::WeightLayout> policy_weight_layout(const policy::ModelConfig& config) {
  std::vector<weightsync::TensorSpec> specs;
  for (const policy::ParamSpec& p : policy::parameter_specs(config)) {
    specs.push_back({p.name, weightsync::DType::kFloat32, p.shape});
  }
  auto layout = weightsync::WeightLayout::build(std::move(specs), sizeof(float));
  if (!layout.ok()) return zorplex::Error{"policy weight layout: " + layout.status().message()};
  return std::move(layout).value();
}

std::string layout_mismatch(const weightsync::WeightLayout& offered, const policy::ModelConfig& config) {
  auto expected = policy_weight_layout(config);
  if (!expected) return expected.error().message;
  if (offered == expected.value()) return "";
  return "the publisher offers " + std::to_string(offered.tensors().size()) + " tensors (" +
         std::to_string(offered.total_bytes()) + " bytes) but this policy needs " +
         std::to_string(expected.value().tensors().size()) + " (" +
         std::to_string(expected.value().total_bytes()) +
         " bytes): the generator's --checkpoint is not the trainer's model";
}

zorplex::Result<weightsync::PublishResult> publish_policy(weightsync::Publisher& publisher,
                                                          std::uint64_t version,
                                                          const policy::Transformer& model) {
  const torch::Tensor flat = model.flat_parameters().contiguous();
  const std::size_t bytes = static_cast<std::size_t>(flat.numel()) * sizeof(float);
  auto published = publisher.publish(version, flat.data_ptr<float>(), bytes);
  if (!published.ok())
    return zorplex::Error{"publishing version " + std::to_string(version) + ": " +
                          published.status().message()};
  return published.value();
}

zorplex::Result<weightsync::PublishTicket> publish_policy_from_device(weightsync::Publisher& publisher,
                                                                      std::uint64_t version,
                                                                      const policy::Transformer& model,
                                                                      void* cuda_stream) {
  const torch::Tensor flat = model.flat_parameters();
  if (!flat.is_cuda())
    return zorplex::Error{"publishing version " + std::to_string(version) +
                          " from the device: the policy is on " + flat.device().str()};
  const std::size_t bytes = static_cast<std::size_t>(flat.numel()) * sizeof(float);
  auto enqueued = publisher.publish_from_device(version, flat.data_ptr<float>(), bytes, cuda_stream);
  if (!enqueued.ok())
    return zorplex::Error{"publishing version " + std::to_string(version) +
                          " from the device: " + enqueued.status().message()};
  return enqueued.value();
}

weightsync::Destination policy_destination(const policy::Transformer& model) {
  const torch::Tensor flat = model.flat_parameters();
  const weightsync::MemoryKind kind =
      flat.is_cuda() ? weightsync::MemoryKind::kCuda : weightsync::MemoryKind::kHost;
  return weightsync::Destination::contiguous(flat.data_ptr<float>(),
                                             static_cast<std::size_t>(flat.numel()) * sizeof(float), kind);
}

std::string weights_digest(const policy::Transformer& model) {
  // to(kCPU) is a no-op for a host buffer and a blocking copy for a CUDA one.
  const torch::Tensor flat = model.flat_parameters().to(torch::kCPU).contiguous();
  const XXH64_hash_t hash =
      XXH3_64bits(flat.data_ptr<float>(), static_cast<std::size_t>(flat.numel()) * sizeof(float));
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace loop
