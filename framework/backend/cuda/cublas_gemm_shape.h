// cublas_gemm_shape.h: a row-major GemmArgs as the column-major call cuBLAS wants, shared by
// the float32 GEMM (cuda_backend.cpp, cublasSgemm) and the 16-bit one (cuda_gemm_lowp.cpp,
// cublasGemmEx).
//
// Row-major C [M, N] = op(A) [M, K] @ op(B) [K, N] is column-major C^T = op(B)^T op(A)^T.
// B not transposed is stored [K, N] row-major = [N, K] column-major with ld N: that is
// op(B)^T already, so cuBLAS gets OP_N; trans_b (stored [N, K], ld K) gets OP_T. Same for A.
// So cuBLAS is called with B first: (op_b, op_a, m = N, n = M, k = K, B, ld_b, A, ld_a, C, ld_c).
#pragma once

#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include "framework/backend/backend.h"
#include "framework/error.h"

namespace dplab::cuda {

struct CublasGemmShape {
  cublasOperation_t op_b, op_a;
  int m, n, k;
  int ld_b, ld_a, ld_c;  // the row length of each operand as stored (at least 1, for K = 0)
};

// `what` names the caller in errors ("gemm", "gemm_lowp").
inline CublasGemmShape cublas_gemm_shape(const GemmArgs& g, const char* what) {
  DPLAB_CHECK(g.batch >= 0 && g.M >= 0 && g.N >= 0 && g.K >= 0,
              "{}: expected non-negative sizes, got batch {} M {} N {} K {}", what, g.batch, g.M,
              g.N, g.K);
  DPLAB_CHECK(g.M <= INT_MAX && g.N <= INT_MAX && g.K <= INT_MAX && g.batch <= INT_MAX,
              "{}: cuBLAS takes int sizes, got batch {} M {} N {} K {}", what, g.batch, g.M, g.N,
              g.K);
  const int m = static_cast<int>(g.N);
  return {.op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          .op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
          .m = m,
          .n = static_cast<int>(g.M),
          .k = static_cast<int>(g.K),
          .ld_b = static_cast<int>(std::max<int64_t>(1, g.trans_b ? g.K : g.N)),
          .ld_a = static_cast<int>(std::max<int64_t>(1, g.trans_a ? g.M : g.K)),
          .ld_c = m};
}

}  // namespace dplab::cuda
