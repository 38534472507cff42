// allocator.h: every byte a tensor holds is allocated here, per device, and counted.
// memory_stats(device) is how dplab measures load imbalance: the DataParallel master holds
// gathered outputs, reduced gradients and optimizer state, and its peak shows it.
// Backends provide the raw allocation (host malloc, or a CUDA caching allocator);
// the counting is done once, here, for all of them.
// Read next: storage.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "framework/tensor/device.h"

namespace dplab {

struct MemoryStats {
  int64_t allocated_bytes = 0;  // bytes held by live tensors now
  int64_t peak_bytes = 0;       // max of allocated_bytes since the last reset
  int64_t alloc_count = 0;      // number of allocations since start
  int64_t reserved_bytes = 0;   // bytes the device allocator keeps (CUDA cache); = allocated on CPU
};

MemoryStats memory_stats(Device d);
void reset_peak_memory_stats(Device d);

// Raw allocation for a device, counted in memory_stats. Zero bytes gives nullptr.
void* device_allocate(Device d, std::size_t nbytes);
void device_free(Device d, void* ptr, std::size_t nbytes);

// Called by the CUDA caching allocator so reserved_bytes can be reported.
void set_reserved_bytes(Device d, int64_t reserved);

}  // namespace dplab
