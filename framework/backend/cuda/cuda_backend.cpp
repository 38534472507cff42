// cuda_backend.cpp: the CUDA backend's memory, copies, synchronisation and GEMM.
// Every call is queued on the stream of one logical device (cuda_devices.cpp); only
// copy_to_host / copy_from_host and synchronize wait, because the host needs the bytes.
// GEMM: cuBLAS is column-major and dplab row-major. A row-major [M, N] matrix is the same
// bytes as a column-major [N, M] one, its transpose, so C = A @ B is computed as
// C^T = B^T @ A^T: pass B first, A second, swap M and N, and no transpose is ever
// materialised. The other kernels are launched from cuda_backend_kernels.cpp.
// Read next: cuda_backend_kernels.cpp.
#include "framework/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <climits>

#include "framework/backend/cuda/cublas_gemm_shape.h"
#include "framework/backend/cuda/cublas_library.h"
#include "framework/backend/cuda/cuda_allocator.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/backend/cuda/cuda_pure.h"
#include "framework/backend/cuda/gpu_probe.h"
#include "framework/error.h"

namespace dplab {

using cuda::bind;
using cuda::LogicalDevice;

namespace {

void expect_cuda(Device d, const char* what) {
  DPLAB_CHECK(d.is_cuda(), "cuda backend {}: expected a cuda device, got {}", what, d);
}

}  // namespace

void* CudaBackend::allocate(Device d, std::size_t nbytes) {
  expect_cuda(d, "allocate");
  if (nbytes == 0) return nullptr;
  cuda::logical_device(d.index);  // throws a clear Error for cuda:k that does not exist
  return cuda::cache_allocate(d.index, nbytes);
}

void CudaBackend::deallocate(Device d, void* p, std::size_t) {
  expect_cuda(d, "deallocate");
  if (p != nullptr) cuda::cache_free(d.index, p);
}

// The host buffer may be freed as soon as we return, so wait for the copy to finish.
void CudaBackend::copy_from_host(Device d, void* dst, const void* src, std::size_t nbytes) {
  expect_cuda(d, "copy_from_host");
  if (nbytes == 0) return;
  LogicalDevice& dev = bind(d.index);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, dev.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
}

// Queued behind every kernel already on the stream, so the host reads their results.
void CudaBackend::copy_to_host(Device d, void* dst, const void* src, std::size_t nbytes) {
  expect_cuda(d, "copy_to_host");
  if (nbytes == 0) return;
  LogicalDevice& dev = bind(d.index);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, dev.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
}

// Within one logical device: a plain device copy (overlapping ranges allowed, as memmove).
// Between two logical devices the copy runs on the destination's stream, fenced by events
// both ways, without blocking the host:
//   1. the copy waits for everything queued on the source stream (the producer of src);
//   2. later work on the source stream (which may overwrite src, or reuse its freed block)
//      waits for the copy.
// Across physical GPUs cudaMemcpyPeerAsync moves the bytes (over NVLink / PCIe, or staged
// through the host when peer access is off); within one GPU a plain device copy does.
void CudaBackend::copy_device(Device dst_dev, void* dst, Device src_dev, const void* src,
                              std::size_t nbytes) {
  expect_cuda(dst_dev, "copy_device (destination)");
  expect_cuda(src_dev, "copy_device (source)");
  if (nbytes == 0) return;
  LogicalDevice& from = cuda::logical_device(src_dev.index);
  LogicalDevice& to = bind(dst_dev.index);
  if (&from == &to) {
    cudaStream_t s = cuda::stream_for(to);
    if (!cuda::ranges_overlap(dst, src, nbytes)) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s));
      return;
    }
    // memmove's contract, which the CPU backend keeps: cudaMemcpy* leaves overlapping ranges
    // undefined, so go through a scratch block (queued on the same stream, so its reuse
    // after the free below waits for both copies: cuda_allocator.cpp).
    void* scratch = cuda::cache_allocate(dst_dev.index, nbytes);
    CUDA_CHECK(cudaMemcpyAsync(scratch, src, nbytes, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(dst, scratch, nbytes, cudaMemcpyDeviceToDevice, s));
    cuda::cache_free(dst_dev.index, scratch);
    return;
  }
  cudaEvent_t src_ready = nullptr, copy_done = nullptr;
  bind(src_dev.index);
  CUDA_CHECK(cudaEventCreateWithFlags(&src_ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(src_ready, from.stream));
  bind(dst_dev.index);
  CUDA_CHECK(cudaEventCreateWithFlags(&copy_done, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamWaitEvent(to.stream, src_ready, 0));
  if (from.physical == to.physical) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, to.stream));
  } else {
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, to.physical, src, from.physical, nbytes, to.stream));
  }
  CUDA_CHECK(cudaEventRecord(copy_done, to.stream));
  CUDA_CHECK(cudaStreamWaitEvent(from.stream, copy_done, 0));
  // Destroying an event that is still pending is allowed: CUDA releases it once it fires.
  CUDA_CHECK(cudaEventDestroy(src_ready));
  CUDA_CHECK(cudaEventDestroy(copy_done));
}

void CudaBackend::synchronize(Device d) {
  expect_cuda(d, "synchronize");
  LogicalDevice& dev = bind(d.index);
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
}

// Row-major C [M, N] = op(A) [M, K] @ op(B) [K, N] as cuBLAS's column-major C^T = op(B)^T
// op(A)^T (cublas_gemm_shape.h). Cost: 2*M*N*K flops per batch entry.
void CudaBackend::gemm(const GemmArgs& g, const float* a, const float* b, float* c) {
  const cuda::CublasGemmShape s = cuda::cublas_gemm_shape(g, "gemm");
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  LogicalDevice& dev = cuda::bind_owner(c, "gemm");
  if (g.batch == 1) {  // the plain GEMM: cuBLAS may pick other kernels for a batch of one
    CUBLAS_CHECK(cuda::cublas().sgemm(dev.cublas, s.op_b, s.op_a, s.m, s.n, s.k, &g.alpha, b,
                                      s.ld_b, a, s.ld_a, &g.beta, c, s.ld_c));
    return;
  }
  CUBLAS_CHECK(cuda::cublas().sgemm_strided_batched(
      dev.cublas, s.op_b, s.op_a, s.m, s.n, s.k, &g.alpha, b, s.ld_b, g.stride_b, a, s.ld_a,
      g.stride_a, &g.beta, c, s.ld_c, g.stride_c, static_cast<int>(g.batch)));
}

Backend& cuda_backend() {
  // The count is asked once (cuda_devices.cpp); without a GPU every use is a clear Error.
  if (const std::string& why = cuda_gpu_probe().error; !why.empty())
    throw CudaError(fmt::format("cuda backend: the GPUs could not be counted: {}", why));
  const int n = cuda_physical_device_count();
  DPLAB_CHECK(n > 0,
              "cuda backend: no CUDA GPU is visible (no driver, or no device); "
              "cudaGetDeviceCount found {} GPU(s)",
              n);
  static CudaBackend backend;
  return backend;
}

}  // namespace dplab
