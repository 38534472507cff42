// cpu_gemm_eigen.h: the reference GEMM, Eigen's, on a tile of C, built twice for two
// instruction sets. cpu_gemm_eigen.cpp is compiled once with the build's flags (x86-64-v3:
// AVX2 + FMA) and, on x86-64, once more with -march=x86-64-v4 (AVX-512), which runs Eigen's
// GEMM about twice as fast where the CPU has it; ../cpu_gemm.cpp picks one at run time
// (../cpu_dispatch.h). This header includes nothing that has inline code, so the AVX-512
// copy cannot leak into the rest (see the .cpp). fast/'s kernels are built the same way.
// Read next: cpu_gemm_eigen.cpp.
#pragma once
#include <cstdint>

namespace dplab::gemm_eigen {

// C[M, N] = alpha * op(A) @ op(B) + beta * C, row-major with leading dimensions lda, ldb, ldc.
// A is stored [M, K] (or [K, M] when trans_a), B [K, N] (or [N, K] when trans_b).
struct Tile {
  int64_t M = 0, N = 0, K = 0, lda = 1, ldb = 1, ldc = 1;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
};

void run_baseline(const Tile& t);
void set_threads_baseline(
    int n);  // Eigen's own thread count, for a GEMM run outside a parallel region
#ifdef DPLAB_HAVE_AVX512_GEMM
void run_avx512(const Tile& t);
void set_threads_avx512(int n);
#endif

}  // namespace dplab::gemm_eigen
