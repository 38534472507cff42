// cuda_check.h: CUDA_CHECK / CUBLAS_CHECK, the only way this folder calls CUDA and cuBLAS.
// A failed call throws dplab::CudaError naming the call as written, the error name and
// string, the device it ran on and file:line, e.g.
//   "CUDA call cudaMalloc(&p, bytes) failed: cudaErrorMemoryAllocation (out of memory)
//    on cuda:1 (physical GPU 0) (framework/backend/cuda/cuda_allocator.cpp:80)".
// Compiled by g++ only (it uses fmt through error.h); .cu launchers return cudaError_t.
// Read next: cuda_devices.h.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace dplab::cuda {

// Throws CudaError when err != cudaSuccess. `call` is the source text of the call.
void check_cuda(cudaError_t err, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t st, const char* call, const char* file, int line);
// The logical device this thread last bound (-1 when none), for error messages.
int current_logical_device();
void set_current_logical_device(int k);

}  // namespace dplab::cuda

#define CUDA_CHECK(call) ::dplab::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::dplab::cuda::check_cublas((call), #call, __FILE__, __LINE__)
