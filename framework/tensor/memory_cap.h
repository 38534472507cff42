// memory_cap.h: a memory cap per logical device, so "out of memory" shows on a laptop.
// Every device starts with the cap of DPLAB_DEVICE_MEMORY ("256M", "1.5G", "512K",
// "1048576"; read at the first allocation) or none; set_memory_cap changes one device's.
// An allocation past the cap throws OutOfMemoryError naming the device, the request, what is
// allocated and the cap, and allocates nothing (the counting lives in allocator.cpp).
// Read next: allocator.h (memory_stats), tutorials/18_zero.md (ZeRO-2 fits where DDP does not).
#pragma once
#include <cstdint>
#include <string>

#include "framework/error.h"
#include "framework/tensor/device.h"

namespace dplab {

struct OutOfMemoryError : Error {
  using Error::Error;
};

// The most bytes live tensors may hold on d; 0 = no cap. Lowering it below what is allocated
// only stops new allocations. Throws on bytes < 0.
void set_memory_cap(Device d, int64_t bytes);
int64_t memory_cap(Device d);

// "256M" -> 268435456 (K, M, G are powers of 1024, optionally followed by B or iB); throws Error.
int64_t parse_memory_size(const std::string& text);
// 268435456 -> "256.0 MiB"
std::string format_bytes(int64_t bytes);

}  // namespace dplab
