// Slots in CUDA device memory (PublisherOptions::slot_memory = kCuda): each
// block is one cudaMalloc on the current device, with its CUDA IPC handle
// exported once, so that same-host subscribers can open it (transport
// cuda_ipc). Device memory cannot be passed as a descriptor.
#pragma once

#include "memory/slot_memory.h"

namespace weightsync::detail {

SlotAllocator cuda_slot_allocator();

}  // namespace weightsync::detail
