// cuda_allocator.h: the caching allocator behind CudaBackend::allocate / deallocate.
// cudaMalloc and cudaFree synchronise the whole GPU and cost 10-100 us each; a training
// step frees and re-allocates the same sizes every iteration, so freed blocks are kept in
// per-device free lists keyed by rounded size and handed out again without a CUDA call.
// Read next: cuda_allocator.cpp (rounding, the safety argument), cuda_backend.cpp.
#pragma once
#include <cstddef>

namespace dplab::cuda {

void* cache_allocate(int logical_device, std::size_t nbytes);
void cache_free(int logical_device, void* p);
// The logical device that owns p (p may point inside a block); throws Error when p is not
// memory from this allocator (a host pointer, or freed memory).
int device_of(const void* p, const char* what);
struct LogicalDevice;
// bind(device_of(p)): the device a kernel writing p must run on, made current.
LogicalDevice& bind_owner(const void* p, const char* what);

}  // namespace dplab::cuda

namespace dplab {
// Base of the cudaMalloc block that contains p, and p's offset inside it (for CUDA IPC:
// cudaIpcGetMemHandle works on whole allocations). Throws Error for foreign pointers.
void* cuda_block_base(void* p, std::size_t* offset);
}  // namespace dplab
