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

zorplex::Result<weightsync::WeightLayout> policy_wire_layout(const policy::ModelConfig& config,
                                                             weightsync::DType wire) {
  auto layout = policy_weight_layout(config);
  if (!layout || wire == weightsync::DType::kFloat32) return layout;
  if (wire == weightsync::DType::kFloat8E4M3) {
    auto fp8 = weightsync::fp8_layout(layout.value());
    if (!fp8.ok()) return zorplex::Error{"policy weight layout: " + fp8.status().message()};
    return std::move(fp8).value();
  }
  auto narrow = weightsync::narrowed_layout(layout.value(), wire);
  if (!narrow.ok()) return zorplex::Error{"policy weight layout: " + narrow.status().message()};
  return std::move(narrow).value();
}

zorplex::Result<weightsync::DType> parse_wire_dtype(const std::string& name) {
  if (name == "fp32") return weightsync::DType::kFloat32;
  if (name == "bf16") return weightsync::DType::kBFloat16;
  if (name == "fp16") return weightsync::DType::kFloat16;
  if (name == "fp8") return weightsync::DType::kFloat8E4M3;
  return zorplex::Error{"wire dtype '" + name + "': use fp32, bf16, fp16 or fp8"};
}

const char* wire_dtype_name(weightsync::DType wire) {
  switch (wire) {
    case weightsync::DType::kFloat32: return "fp32";
    case weightsync::DType::kBFloat16: return "bf16";
    case weightsync::DType::kFloat16: return "fp16";
    case weightsync::DType::kFloat8E4M3: return "fp8";
    default: return weightsync::to_string(wire);
  }
}

weightsync::DType offered_wire_dtype(const weightsync::WeightLayout& offered) {
  for (const weightsync::TensorEntry& t : offered.tensors()) {
    if (t.spec.dtype == weightsync::DType::kFloat8E4M3) return weightsync::DType::kFloat8E4M3;
  }
  return offered.tensors().empty() ? weightsync::DType::kFloat32 : offered.tensors().front().spec.dtype;
}

std::string layout_mismatch(const weightsync::WeightLayout& offered, const policy::ModelConfig& config) {
  auto expected = policy_weight_layout(config);
  if (!expected) return expected.error().message;
  if (offered == expected.value()) return "";
  if (offered_wire_dtype(offered) != weightsync::DType::kFloat32 &&
      weightsync::check_widenable(offered, expected.value()).ok()) {
    return "";
  }
  if (offered_wire_dtype(offered) == weightsync::DType::kFloat8E4M3) {
    const weightsync::Status pair = weightsync::check_fp8_pair(offered, expected.value());
    if (pair.ok()) return "";
    return "the publisher's fp8 layout is not a form of this policy's: " + pair.message() +
           " (the generator's --checkpoint is not the trainer's model)";
  }
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

zorplex::Result<weightsync::NarrowHandoff> publish_policy_narrow(weightsync::NarrowingPublisher& publisher,
                                                                 std::uint64_t version,
                                                                 const policy::Transformer& model) {
  const torch::Tensor flat = model.flat_parameters().contiguous();
  if (flat.is_cuda())
    return zorplex::Error{"publishing version " + std::to_string(version) + " in " +
                          wire_dtype_name(publisher.narrow_dtype()) +
                          ": the conversion runs on the host, and the policy is on " + flat.device().str()};
  const std::size_t bytes = static_cast<std::size_t>(flat.numel()) * sizeof(float);
  auto handed = publisher.publish(version, flat.data_ptr<float>(), bytes);
  if (!handed.ok())
    return zorplex::Error{"publishing version " + std::to_string(version) + " in " +
                          wire_dtype_name(publisher.narrow_dtype()) + ": " + handed.status().message()};
  return handed.value();
}

zorplex::Result<weightsync::NarrowHandoff> publish_policy_narrow(weightsync::Fp8Publisher& publisher,
                                                                 std::uint64_t version,
                                                                 const policy::Transformer& model) {
  const torch::Tensor flat = model.flat_parameters().contiguous();
  if (flat.is_cuda())
    return zorplex::Error{"publishing version " + std::to_string(version) +
                          " in fp8: the quantization runs on the host, and the policy is on " + flat.device().str()};
  const std::size_t bytes = static_cast<std::size_t>(flat.numel()) * sizeof(float);
  auto handed = publisher.publish(version, flat.data_ptr<float>(), bytes);
  if (!handed.ok())
    return zorplex::Error{"publishing version " + std::to_string(version) + " in fp8: " +
                          handed.status().message()};
  return handed.value();
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

zorplex::Result<std::unique_ptr<PolicyPullTarget>> PolicyPullTarget::create(
    const weightsync::WeightLayout& offered, const policy::Transformer& model) {
  const std::string mismatch = layout_mismatch(offered, model.config());
  if (!mismatch.empty()) return zorplex::Error{mismatch};
  auto wide = policy_weight_layout(model.config());
  if (!wide) return wide.error();
  const weightsync::DType wire =
      offered == wide.value() ? weightsync::DType::kFloat32 : offered_wire_dtype(offered);
  std::unique_ptr<PolicyPullTarget> target(new PolicyPullTarget(offered, std::move(wide).value(), wire));
  if (target->widens()) {
    auto image = weightsync::HostBuffer::allocate(offered.total_bytes());
    if (!image.ok())
      return zorplex::Error{"the " + std::string(wire_dtype_name(wire)) +
                            " pull image: " + image.status().message()};
    target->image_ = std::move(image).value();
    if (model.flat_parameters().is_cuda())
      target->host_wide_ = torch::empty({model.flat_parameters().numel()}, torch::kFloat32);
  }
  return target;
}

weightsync::Destination PolicyPullTarget::destination(const policy::Transformer& model) {
  if (!widens()) return policy_destination(model);
  return weightsync::Destination::contiguous(image_.data(), image_.size());
}

zorplex::Result<bool> PolicyPullTarget::finish(const policy::Transformer& model) {
  if (!widens()) return true;
  torch::Tensor flat = model.flat_parameters();
  void* into = flat.is_cuda() ? host_wide_.data_ptr<float>() : flat.data_ptr<float>();
  const weightsync::Status widened = wire_ == weightsync::DType::kFloat8E4M3
                                         ? weightsync::dequantize_image(offered_, image_.data(), wide_, into)
                                         : weightsync::widen_image(offered_, image_.data(), wide_, into);
  if (!widened.ok()) return zorplex::Error{"widening the pulled weights: " + widened.message()};
  if (flat.is_cuda()) {
    torch::NoGradGuard no_grad;
    flat.copy_(host_wide_);
  }
  return true;
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
