// cuda_devices.h: logical CUDA devices. cuda:k is a stream (non-blocking), a cuBLAS handle
// bound to it and a small device-side error flag, on physical GPU k % M when virtual GPUs
// are on (DPLAB_VIRTUAL_GPUS=N or set_virtual_gpus(N)), else on GPU k (k < M, or an Error).
// One stream per logical device keeps everything queued on cuda:k in issue order, which is
// what makes the caching allocator's reuse safe (see cuda_allocator.cpp).
// Read next: cuda_allocator.h.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dplab::cuda {

struct LogicalDevice {
  int logical = 0;
  int physical = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // [0] = number of bad indices seen, [1] = the first bad index (kernels cannot throw)
  unsigned long long* err_flag = nullptr;
};

// Physical GPUs; 0 on any error (no driver: cudaErrorInsufficientDriver; no device: 100).
int physical_count();
// The logical device k, created on first use; throws Error when k does not exist.
LogicalDevice& logical_device(int k);
// cudaSetDevice(physical) for k, records k for error messages, returns the device.
LogicalDevice& bind(int k);
// After a launch that checks indices: waits for dev's stream, reads its error flag and
// clears it. Returns the number of bad indices seen (0: all good) and the first in *first.
unsigned long long take_index_errors(LogicalDevice& dev, int64_t* first);

}  // namespace dplab::cuda
