// cuda_gemm_lowp.cpp: GEMM on 16-bit operands with cuBLAS: cublasGemmEx (or its strided
// batched form) with A, B, C in CUDA_R_16F / CUDA_R_16BF and CUBLAS_COMPUTE_32F, so
// products are summed in float32 and tensor cores run where the GPU has them (sm_70+ for
// float16, sm_80+ for bfloat16). alpha and beta are floats, as the 32F compute type wants.
// The row-major / column-major swap is cuda_backend.cpp's (C^T = B^T A^T).
// Read next: backend/cpu/cpu_gemm_lowp.cpp (the CPU reference it is tested against).
#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include "framework/backend/cuda/cuda_allocator.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/error.h"

namespace dplab {

void CudaBackend::gemm_lowp(const GemmArgs& g, DType t, const void* a, const void* b, void* c) {
  DPLAB_CHECK(is_low_precision(t), "gemm_lowp: expected float16 or bfloat16, got {}", dtype_name(t));
  DPLAB_CHECK(g.batch >= 0 && g.M >= 0 && g.N >= 0 && g.K >= 0,
              "gemm_lowp: expected non-negative sizes, got batch {} M {} N {} K {}", g.batch, g.M,
              g.N, g.K);
  DPLAB_CHECK(g.M <= INT_MAX && g.N <= INT_MAX && g.K <= INT_MAX && g.batch <= INT_MAX,
              "gemm_lowp: cuBLAS takes int sizes, got batch {} M {} N {} K {}", g.batch, g.M,
              g.N, g.K);
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  cuda::LogicalDevice& dev = cuda::bind_owner(c, "gemm_lowp");
  const cudaDataType_t type = t == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
  const int m = static_cast<int>(g.N), n = static_cast<int>(g.M), k = static_cast<int>(g.K);
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_b = static_cast<int>(std::max<int64_t>(1, g.trans_b ? g.K : g.N));
  const int ld_a = static_cast<int>(std::max<int64_t>(1, g.trans_a ? g.M : g.K));
  const int ld_c = m;
  if (g.batch == 1) {
    CUBLAS_CHECK(cublasGemmEx(dev.cublas, op_b, op_a, m, n, k, &g.alpha, b, type, ld_b, a, type,
                              ld_a, &g.beta, c, type, ld_c, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    return;
  }
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(dev.cublas, op_b, op_a, m, n, k, &g.alpha, b, type,
                                          ld_b, g.stride_b, a, type, ld_a, g.stride_a, &g.beta,
                                          c, type, ld_c, g.stride_c, static_cast<int>(g.batch),
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace dplab
