#include "loop/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <exception>
#include <vector>

#include "weightsync/cuda.h"

namespace loop {
namespace {

// Why libtorch cannot run the policy on a GPU; "" when it can.
std::string torch_cuda_problem() {
  if (torch::cuda::is_available()) return "";
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    return "libtorch is a CPU-only build (Debian's is one: a CUDA-enabled libtorch is needed)";
  return "libtorch sees no CUDA device (torch::cuda::is_available() is false)";
}

// Why libweightsync cannot move CUDA memory; "" when it can.
std::string weightsync_cuda_problem() {
  const weightsync::CudaInfo info = weightsync::cuda_info();
  if (info.usable) return "";
  return "libweightsync: " + (info.reason.empty() ? std::string("CUDA not usable") : info.reason);
}

zorplex::Error no_gpu(const std::vector<std::string>& reasons) {
  std::string message = "--device cuda: no usable GPU: ";
  for (std::size_t i = 0; i < reasons.size(); ++i) message += (i == 0 ? "" : "; ") + reasons[i];
  return zorplex::Error{message + " (use --device cpu)"};
}

}  // namespace

zorplex::Result<torch::Device> select_device(const std::string& name) try {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name != "cuda") return zorplex::Error{"--device " + name + ": expected cpu or cuda"};
  std::vector<std::string> reasons;
  for (std::string problem : {torch_cuda_problem(), weightsync_cuda_problem()}) {
    if (!problem.empty()) reasons.push_back(std::move(problem));
  }
  if (!reasons.empty()) return no_gpu(reasons);
  return torch::Device(torch::kCUDA, 0);
} catch (const std::exception& e) {
  return zorplex::Error{"--device " + name + ": " + e.what()};
}

std::string describe_device(const torch::Device& device) {
  if (!device.is_cuda()) return device.str();
  const std::string name = weightsync::cuda_info().device_name;
  return name.empty() ? device.str() : device.str() + " (" + name + ")";
}

void* publish_stream(const torch::Device& device) {
  if (!device.is_cuda()) return nullptr;
  const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  if (cuda->getStream(device) != cuda->getDefaultStream(device)) torch::cuda::synchronize(device.index());
  return nullptr;
}

}  // namespace loop
