// cpu_gemm.cpp: C = alpha * op(A) @ op(B) + beta * C on the CPU, through Eigen's GEMM.
// The buffers are wrapped in Eigen::Map (no copy) as row-major matrices; a transposed
// operand is the Map of its stored shape with .transpose(), which Eigen folds into its
// packing step, so no transposed copy is ever made. noalias() tells Eigen C does not overlap
// A or B, so it writes straight into C instead of a temporary.
// Cost: 2*M*N*K flops per batch entry. Speed depends on building with AVX2+FMA
// (see TOOLCHAIN.md). With more than one thread (cpu_threads.h) the columns of C are split
// between threads, each running Eigen on its slice: Eigen's own split suits square
// matrices, but made a convolution's skinny GEMMs ([32, 400] @ [400, 5000]) slower on two
// threads than on one. Read next: cpu_elementwise.cpp.
#include <Eigen/Core>
#include <algorithm>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"

namespace dplab {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using ConstMap = Eigen::Map<const RowMat, 0, Stride>;
using Map = Eigen::Map<RowMat, 0, Stride>;

// Columns [n0, n0 + n) of one batch entry. A is stored [M, K] (or [K, M] when TransA),
// B [K, N] (or [N, K]), C [M, N], all row-major; a column slice of B and C keeps their
// row stride (N), while a slice of a transposed B is a block of its rows.
template <bool TransA, bool TransB>
void gemm_columns(const GemmArgs& g, const float* a, const float* b, float* c, int64_t n0, int64_t n) {
  // (strides of at least 1: an empty dimension must not give Eigen a zero stride)
  ConstMap A(a, TransA ? g.K : g.M, TransA ? g.M : g.K, Stride(std::max<int64_t>(1, TransA ? g.M : g.K)));
  ConstMap B(TransB ? b + n0 * g.K : b + n0, TransB ? n : g.K, TransB ? g.K : n,
             Stride(std::max<int64_t>(1, TransB ? g.K : g.N)));
  Map C(c + n0, g.M, n, Stride(g.N));
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

// Below this many columns per thread, splitting costs more than it gains.
constexpr int64_t kMinColumnsPerThread = 64;

template <bool TransA, bool TransB>
void gemm_batched(const GemmArgs& g, const float* a, const float* b, float* c) {
  const int threads = get_num_threads();
  const int parts = static_cast<int>(std::clamp<int64_t>(g.N / kMinColumnsPerThread, 1, threads));
  for (int64_t i = 0; i < g.batch; ++i) {
    const float *ai = a + i * g.stride_a, *bi = b + i * g.stride_b;
    float* ci = c + i * g.stride_c;
    if (parts == 1) {
      gemm_columns<TransA, TransB>(g, ai, bi, ci, 0, g.N);
      continue;
    }
    // Each thread owns a slice of C's columns; inside a parallel region Eigen runs serially.
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int p = 0; p < parts; ++p) {
      const int64_t n0 = g.N * p / parts, n1 = g.N * (p + 1) / parts;
      gemm_columns<TransA, TransB>(g, ai, bi, ci, n0, n1 - n0);
    }
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
