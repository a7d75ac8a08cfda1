// loop/device.h: where the trainer's and a generator's policy lives (their
// --device option), and what a device publish needs from libtorch.
//
// Contract
// - select_device("cpu") is torch::kCPU and touches no GPU.
//   select_device("cuda") is cuda:0, the first GPU that CUDA_VISIBLE_DEVICES
//   leaves visible (it is also the current device of both libtorch and
//   libweightsync unless the caller changes it), when both libtorch
//   (a CUDA backend and torch::cuda::is_available()) and libweightsync
//   (weightsync::cuda_info().usable) can use a GPU. Otherwise an Error
//   "--device cuda: no usable GPU: ..." that names every reason found (a
//   CPU-only libtorch such as Debian's, no device visible, libweightsync built
//   without CUDA, no driver, ...). Any other name is an Error. Never throws.
// - describe_device(device): "cpu", or "cuda:0 (DEVICE NAME)" for the logs.
// - publish_stream(device) is the cudaStream_t (as void*) to hand to
//   Publisher::publish_from_device() so that the copy is ordered after the
//   kernels that wrote the parameters. libtorch queues them on its current
//   stream, which is the legacy default stream (nullptr) unless someone made
//   another stream current. This build does not depend on a CUDA-enabled
//   libtorch, so another current stream cannot be named: then the device is
//   synchronized first (every queued kernel has finished) and nullptr is
//   returned, which is still correct, only slower. For a CPU device: nullptr.
// - Threads: any thread; publish_stream() looks at the calling thread's
//   current stream.
#pragma once

#include <torch/torch.h>

#include <string>

#include "zorplex/result.h"

namespace loop {

zorplex::Result<torch::Device> select_device(const std::string& name);

std::string describe_device(const torch::Device& device);

void* publish_stream(const torch::Device& device);

}  // namespace loop
