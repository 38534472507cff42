// cpu_gemm.cpp: C = alpha * op(A) @ op(B) + beta * C on the CPU, through Eigen's GEMM.
// The buffers are wrapped in Eigen::Map (no copy) as row-major matrices; a transposed
// operand is the Map of its stored shape with .transpose(), which Eigen folds into its
// packing step, so no transposed copy is ever made. noalias() tells Eigen C does not overlap
// A or B, so it writes straight into C instead of a temporary.
// Cost: 2*M*N*K flops per batch entry. Speed depends on building with AVX2+FMA
// (see TOOLCHAIN.md); threads come from cpu_threads.h. Read next: cpu_elementwise.cpp.
#include <Eigen/Core>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/error.h"

namespace dplab {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

// One batch entry. A is stored [M, K] (or [K, M] when TransA), B [K, N] (or [N, K]).
template <bool TransA, bool TransB>
void gemm_one(const GemmArgs& g, const float* a, const float* b, float* c) {
  ConstMap A(a, TransA ? g.K : g.M, TransA ? g.M : g.K);
  ConstMap B(b, TransB ? g.N : g.K, TransB ? g.K : g.N);
  Map C(c, g.M, g.N);
  // beta == 0 must not read C: it may be uninitialised memory holding NaNs.
  if (g.beta == 0.0f) {
    C.setZero();
  } else if (g.beta != 1.0f) {
    C *= g.beta;
  }
  if (g.K == 0) return;  // op(A) @ op(B) is all zeros
  // C += alpha * op(A) @ op(B): Eigen extracts alpha and the transposes into one GEMM call.
  if constexpr (TransA && TransB) {
    C.noalias() += g.alpha * (A.transpose() * B.transpose());
  } else if constexpr (TransA) {
    C.noalias() += g.alpha * (A.transpose() * B);
  } else if constexpr (TransB) {
    C.noalias() += g.alpha * (A * B.transpose());
  } else {
    C.noalias() += g.alpha * (A * B);
  }
}

template <bool TransA, bool TransB>
void gemm_batched(const GemmArgs& g, const float* a, const float* b, float* c) {
  for (int64_t i = 0; i < g.batch; ++i) {
    gemm_one<TransA, TransB>(g, a + i * g.stride_a, b + i * g.stride_b, c + i * g.stride_c);
  }
}

}  // namespace

void CpuBackend::gemm(const GemmArgs& g, const float* a, const float* b, float* c) {
  DPLAB_CHECK(g.batch >= 0 && g.M >= 0 && g.N >= 0 && g.K >= 0,
              "gemm: expected non-negative sizes, got batch={} M={} N={} K={}", g.batch, g.M,
              g.N, g.K);
  // Batch entries that share C would race on it (and sum wrongly with beta != 0).
  DPLAB_CHECK(g.batch <= 1 || g.stride_c != 0,
              "gemm: stride_c is 0 for batch={}; every batch entry needs its own C", g.batch);
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  if (g.trans_a) {
    if (g.trans_b) gemm_batched<true, true>(g, a, b, c);
    else gemm_batched<true, false>(g, a, b, c);
  } else {
    if (g.trans_b) gemm_batched<false, true>(g, a, b, c);
    else gemm_batched<false, false>(g, a, b, c);
  }
}

}  // namespace dplab
