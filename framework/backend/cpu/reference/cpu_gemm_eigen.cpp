// cpu_gemm_eigen.cpp: C = alpha * op(A) @ op(B) + beta * C on one tile, through Eigen: the
// reference GEMM (fast/cpu_gemm_direct_kernel.cpp is tested against it).
// The buffers are wrapped in Eigen::Map (no copy) as row-major matrices; a transposed operand
// is the Map of its stored shape with .transpose(), which Eigen folds into its packing step,
// so no transposed copy is ever made. noalias() tells Eigen C does not overlap A or B.
//
// This file is compiled twice (backend/cpu/meson.build). Code built for AVX-512 must never run
// on a CPU without it, and the linker keeps one copy of each inline function or template it
// finds in two objects, picking either. So the AVX-512 build renames Eigen's namespace: its
// templates become different symbols from the baseline build's, and tests/build checks that
// the AVX-512 object defines no other shared (weak) symbol.
#if defined(DPLAB_GEMM_AVX512)
#define Eigen dplab_eigen_avx512
#define KERNEL_NAME(name) name##_avx512
#else
#define KERNEL_NAME(name) name##_baseline
#endif

#include <Eigen/Core>

#include "framework/backend/cpu/reference/cpu_gemm_eigen.h"

namespace dplab::gemm_eigen {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using ConstMap = Eigen::Map<const RowMat, 0, Stride>;
using Map = Eigen::Map<RowMat, 0, Stride>;

template <bool TransA, bool TransB>
void run_tile(const Tile& t) {
  ConstMap A(t.a, TransA ? t.K : t.M, TransA ? t.M : t.K, Stride(t.lda));
  ConstMap B(t.b, TransB ? t.N : t.K, TransB ? t.K : t.N, Stride(t.ldb));
  Map C(t.c, t.M, t.N, Stride(t.ldc));
  // beta == 0 must not read C: it may be uninitialised memory holding NaNs.
  if (t.beta == 0.0f) {
    C.setZero();
  } else if (t.beta != 1.0f) {
    C *= t.beta;
  }
  if (t.K == 0) return;  // op(A) @ op(B) is all zeros
  // C += alpha * op(A) @ op(B): Eigen extracts alpha and the transposes into one GEMM call.
  if constexpr (TransA && TransB) {
    C.noalias() += t.alpha * (A.transpose() * B.transpose());
  } else if constexpr (TransA) {
    C.noalias() += t.alpha * (A.transpose() * B);
  } else if constexpr (TransB) {
    C.noalias() += t.alpha * (A * B.transpose());
  } else {
    C.noalias() += t.alpha * (A * B);
  }
}

}  // namespace

void KERNEL_NAME(run)(const Tile& t) {
  if (t.trans_a) {
    if (t.trans_b) run_tile<true, true>(t);
    else run_tile<true, false>(t);
  } else {
    if (t.trans_b) run_tile<false, true>(t);
    else run_tile<false, false>(t);
  }
}

void KERNEL_NAME(set_threads)(int n) {
  // Also initialises Eigen's static tables (cache sizes) before threads call GEMM concurrently
  // (Eigen's documented requirement for multi-threaded callers).
  Eigen::initParallel();
#ifdef _OPENMP
  Eigen::setNbThreads(n);
#endif
}

}  // namespace dplab::gemm_eigen
