// virtual_gpus.h: the public knobs of the CUDA backend, with no CUDA type in sight, so any
// program (and a CPU-only build) can call them.
// Logical devices: cuda:0..cuda:N-1 may outnumber the physical GPUs; cuda:k then runs on
// physical GPU k % M with its own stream and its own memory accounting, so a one-GPU box
// can rehearse a 4-GPU DataParallel run (slower, never silently: it is printed once).
// Read next: cuda_devices.cpp (the mapping), cuda_allocator.cpp (the cache).
#pragma once
#include <cstddef>

namespace dplab {

// Ask for n logical CUDA devices (n >= 1), as env DPLAB_VIRTUAL_GPUS=n does.
// In a build without CUDA this only checks n: there is no cuda device to share anyway.
void set_virtual_gpus(int n);
// Logical CUDA devices usable now: the virtual count when set, else the physical count
// (0 without CUDA, driver or GPU).
int cuda_logical_device_count();
// Release the cached (free) blocks of one logical device back to cudaFree; a no-op
// without CUDA. Live tensors are untouched.
void cuda_empty_cache(int logical_device);

}  // namespace dplab
