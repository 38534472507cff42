// ops_eigen_direct.cpp: the reference GEMM for bench_ops: no dplab code in the path, just
// Eigen's product on Maps of the same row-major buffers dplab's matmul works on. Compiled
// with the same flags (-march=x86-64-v3, OpenMP) as framework/backend/cpu/, so the ratio
// measures dplab's overhead (op checks, allocation, dispatch), not a compiler difference.
#include "benchmarks/ops_eigen_direct.h"

#include <Eigen/Core>

namespace dplab::bench {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void eigen_gemm_direct(const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K) {
  Eigen::Map<const RowMat> A(a, M, K), B(b, K, N);
  Eigen::Map<RowMat> C(c, M, N);
  C.noalias() = A * B;
}

int eigen_threads() { return Eigen::nbThreads(); }

}  // namespace dplab::bench
