// virtual_gpus_fallback.cpp: virtual_gpus.h for a build WITHOUT CUDA (compile this file
// only when have_cuda is false; with CUDA, cuda_devices.cpp and cuda_allocator.cpp define
// these). Code that sets up logical GPUs then still links and simply finds none.
// Read next: virtual_gpus.h.
#include "framework/backend/cuda/gpu_probe.h"
#include "framework/backend/cuda/virtual_gpus.h"

#include "framework/error.h"
#include "framework/tensor/device.h"

namespace dplab {

void set_virtual_gpus(int n) {
  // Checked as in a CUDA build, so a bad value fails the same way everywhere; nothing else
  // to do, since there is no CUDA device to share.
  DPLAB_CHECK(n >= 1 && n <= kMaxDevicesPerKind, "set_virtual_gpus: expected n in [1, {}], got {}",
              kMaxDevicesPerKind, n);
}

// No CUDA compiled in: no logical device exists, whatever was requested.
int cuda_logical_device_count() { return 0; }

void cuda_empty_cache(int) {}

// Nothing to ask: no GPU, and nothing went wrong counting them.
const GpuProbe& cuda_gpu_probe() {
  static const GpuProbe none{};
  return none;
}

}  // namespace dplab
