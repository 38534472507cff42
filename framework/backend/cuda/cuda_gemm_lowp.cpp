// cuda_gemm_lowp.cpp: GEMM on 16-bit operands with cuBLAS: cublasGemmEx (or its strided
// batched form) with A, B, C in CUDA_R_16F / CUDA_R_16BF and CUBLAS_COMPUTE_32F, so
// products are summed in float32 and tensor cores run where the GPU has them (sm_70+ for
// float16, sm_80+ for bfloat16). alpha and beta are floats, as the 32F compute type wants.
// The row-major / column-major swap is cublas_gemm_shape.h's (C^T = B^T A^T).
// Read next: backend/cpu/cpu_gemm_lowp.cpp (the CPU reference it is tested against).
#include <cublas_v2.h>

#include "framework/backend/cuda/cublas_gemm_shape.h"
#include "framework/backend/cuda/cublas_library.h"
#include "framework/backend/cuda/cuda_allocator.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/error.h"

namespace dplab {

void CudaBackend::gemm_lowp(const GemmArgs& g, DType t, const void* a, const void* b, void* c) {
  DPLAB_CHECK(is_low_precision(t), "gemm_lowp: expected float16 or bfloat16, got {}",
              dtype_name(t));
  const cuda::CublasGemmShape s = cuda::cublas_gemm_shape(g, "gemm_lowp");
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  cuda::LogicalDevice& dev = cuda::bind_owner(c, "gemm_lowp");
  const cudaDataType_t type = t == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
  if (g.batch == 1) {
    CUBLAS_CHECK(cuda::cublas().gemm_ex(dev.cublas, s.op_b, s.op_a, s.m, s.n, s.k, &g.alpha, b,
                                        type, s.ld_b, a, type, s.ld_a, &g.beta, c, type, s.ld_c,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  CUBLAS_CHECK(cuda::cublas().gemm_strided_batched_ex(
      dev.cublas, s.op_b, s.op_a, s.m, s.n, s.k, &g.alpha, b, type, s.ld_b, g.stride_b, a, type,
      s.ld_a, g.stride_a, &g.beta, c, type, s.ld_c, g.stride_c, static_cast<int>(g.batch),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace dplab
