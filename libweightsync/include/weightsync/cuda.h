// weightsync/cuda.h: whether this build and this machine can use CUDA memory.
//
// Contract
// - cuda_info() says whether the library was built with CUDA
//   (WEIGHTSYNC_WITH_CUDA) and whether a CUDA device can be used here; when it
//   cannot, `reason` says why in words an operator can act on ("built without
//   CUDA", "no CUDA driver", "no CUDA device"). It initializes the CUDA runtime
//   on first use (cheap where no driver is installed). Any thread; never throws.
// - CUDA memory is named by MemoryKind::kCuda (weightsync/memory.h):
//   PublisherOptions::slot_memory, Destination::contiguous/scatter, and the
//   device sources of Publisher::publish_from_device(). A build without CUDA,
//   or a machine without a device, refuses them with kInvalidConfig and this
//   reason. Device memory is always the caller's current device
//   (cudaSetDevice) at the time of the call.
// - Streams cross this API as `void*` holding a cudaStream_t, so callers and
//   this header need no CUDA headers; nullptr is the legacy default stream
//   (the one PyTorch uses unless told otherwise).
#pragma once

#include <string>

namespace weightsync {

struct CudaInfo {
  bool built = false;   // compiled with WEIGHTSYNC_WITH_CUDA
  bool usable = false;  // built, a driver is loaded and at least one device is visible
  std::string reason;   // why not, when !usable
  int device_count = 0;
  int runtime_version = 0;  // e.g. 13000
  int driver_version = 0;   // 0 without a driver
  std::string device_name;  // the current device's name, when usable
};

CudaInfo cuda_info();

}  // namespace weightsync
