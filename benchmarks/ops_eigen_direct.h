// ops_eigen_direct.h: Eigen's own GEMM called straight on raw buffers, the yardstick that
// bench_ops compares dplab's matmul against. Kept in its own file so Eigen stays out of
// benchmarks/ops.cpp (the house rule: Eigen only where the CPU kernels live, plus here).
// Read next: benchmarks/ops.cpp.
#pragma once
#include <cstdint>

namespace dplab::bench {

// c[M, N] = a[M, K] @ b[K, N], row-major float32, exactly `C.noalias() = A * B` on Maps.
void eigen_gemm_direct(const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K);

// Eigen's idea of its thread count (to show it agrees with dplab::get_num_threads()).
int eigen_threads();

}  // namespace dplab::bench
