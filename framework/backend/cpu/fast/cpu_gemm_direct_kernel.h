// cpu_gemm_direct_kernel.h: a GEMM that reads both operands where they lie, built twice
// (AVX2 + FMA, and AVX-512) like the Eigen kernel (reference/cpu_gemm_eigen.h says why). Eigen copies
// ("packs") both operands into cache-sized panels before multiplying; for the GEMMs of a
// training step at batch 64, whose operands are read once or twice, that copy cost more than
// it saved (a tenth of the MLP's step). cpu_gemm.cpp decides which GEMMs come here.
// Read next: cpu_gemm_direct_kernel.cpp.
#pragma once
#include <cstdint>

namespace dplab::gemm_direct {

// The column width every N must be a multiple of: a whole AVX-512 vector, two AVX2 vectors.
inline constexpr int64_t kColumnBlock = 16;

// C[m, n] = (accumulate ? C[m, n] : 0) + sum over k < K of A(m, k) * B[k * ldb + n], for
// m < M and n < N (a multiple of kColumnBlock), with A(m, k) = a[m * a_row + k * a_step]:
// A may be row-major (a_row = lda, a_step = 1) or transposed (a_row = 1, a_step = lda).
// C[m, n] is c[m * ldc + n], or c[n * ldc + m] when transpose_c (C stored transposed).
// Each C[m, n] is summed in the order k = 0, 1, ..., so it is the same float however the
// rows are split between threads, and in either build.
struct Gemm {
  int64_t M = 0, N = 0, K = 0;
  const float* a = nullptr;
  int64_t a_row = 0, a_step = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false, transpose_c = false;
};

void run_baseline(const Gemm& g);
#ifdef DPLAB_HAVE_AVX512_GEMM
void run_avx512(const Gemm& g);
#endif

}  // namespace dplab::gemm_direct
