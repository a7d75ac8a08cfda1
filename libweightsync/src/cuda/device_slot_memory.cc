// CUDA device memory as slot memory.
#include "cuda/device_slot_memory.h"

#include "cuda/cuda_runtime.h"

namespace weightsync::detail {
namespace {

class DeviceSlotMemory final : public SlotMemory {
 public:
  DeviceSlotMemory(DeviceMemory memory, CudaIpcHandle handle) : memory_(std::move(memory)), handle_(handle) {}
  void* data() const noexcept override { return memory_.data(); }
  std::size_t size() const noexcept override { return memory_.size(); }
  std::size_t mapped_size() const noexcept override { return memory_.size(); }
  bool shareable_by_descriptor() const noexcept override { return false; }
  Result<int> open_read_only() const override {
    return Status(ErrorCode::kInvalidConfig, "CUDA slot memory cannot be passed as a descriptor");
  }
  MemoryKind memory_kind() const noexcept override { return MemoryKind::kCuda; }
  Result<CudaIpcHandle> cuda_ipc_handle() const override { return handle_; }

 private:
  DeviceMemory memory_;
  CudaIpcHandle handle_;
};

}  // namespace

SlotAllocator cuda_slot_allocator() {
  return SlotAllocator{
      "cuda", [](std::size_t bytes, const char*) -> Result<std::unique_ptr<SlotMemory>> {
        auto memory = DeviceMemory::allocate(bytes);
        if (!memory.ok()) return memory.status();
        auto handle = export_ipc_handle(memory->data());
        if (!handle.ok()) return handle.status();
        return std::unique_ptr<SlotMemory>(new DeviceSlotMemory(std::move(*memory), *handle));
      }};
}

}  // namespace weightsync::detail
