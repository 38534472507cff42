// cpu_gemm.cpp: C = alpha * op(A) @ op(B) + beta * C on the CPU: checks, threads, dispatch.
// The multiply itself is fast/'s direct kernel (fast/cpu_gemm_direct_kernel.cpp) where the
// shapes and the settings let it (cpu_dispatch.cpp decides: gemm_direct_runs), and
// reference/'s Eigen GEMM (reference/cpu_gemm_eigen.cpp) elsewhere, each in the build for the
// instruction set cpu_dispatch.h chose. Cost: 2*M*N*K flops per batch entry.
// With more than one thread (cpu_threads.h) the columns of C (or, for a narrow C, its rows) are
// split between threads, each running the kernel on its slice: Eigen's own split suits square
// matrices, but made a convolution's skinny GEMMs ([32, 400] @ [400, 5000]) slower on two
// threads than on one, and its threads wait for each other by spinning: on a busy machine the
// CNN's small classifier GEMM ([64, 1568] @ [1568, 10], which Eigen split in two) then took
// most of a two-thread step, spinning.
// Read next: reference/cpu_gemm_eigen.cpp, fast/cpu_gemm_direct_kernel.cpp.
#include <algorithm>
#include <memory>
#include <vector>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/backend/cpu/cpu_vector.h"  // transpose_floats (8 x 8 tiles)
#include "framework/backend/cpu/fast/cpu_gemm_direct_kernel.h"
#include "framework/backend/cpu/reference/cpu_gemm_eigen.h"
#include "framework/error.h"

namespace dplab {
namespace {

// C's columns [n0, n0 + n) of one batch entry, as one tile for the kernel. A column slice of
// B and C keeps their row stride (N), while a slice of a transposed B is a block of its rows.
gemm_eigen::Tile column_tile(const GemmArgs& g, const float* a, const float* b, float* c,
                             int64_t n0, int64_t n) {
  // (strides of at least 1: an empty dimension must not give Eigen a zero stride)
  return {.M = g.M,
          .N = n,
          .K = g.K,
          .lda = std::max<int64_t>(1, g.trans_a ? g.M : g.K),
          .ldb = std::max<int64_t>(1, g.trans_b ? g.K : g.N),
          .ldc = g.N,
          .trans_a = g.trans_a,
          .trans_b = g.trans_b,
          .alpha = g.alpha,
          .beta = g.beta,
          .a = a,
          .b = g.trans_b ? b + n0 * g.K : b + n0,
          .c = c + n0};
}

void run_tile(GemmIsa isa, const gemm_eigen::Tile& t) {
#if defined(DPLAB_HAVE_AVX512_GEMM)
  if (isa == GemmIsa::Avx512) return gemm_eigen::run_avx512(t);
#endif
  gemm_eigen::run_baseline(t);
}

// C's rows [m0, m0 + m) of one batch entry: a row slice of A (a block of its columns when
// transposed) and of C.
gemm_eigen::Tile row_tile(const GemmArgs& g, const float* a, const float* b, float* c, int64_t m0,
                          int64_t m) {
  gemm_eigen::Tile t = column_tile(g, a, b, c, 0, g.N);
  t.M = m;
  t.a = g.trans_a ? a + m0 : a + m0 * g.K;
  t.c = c + m0 * g.N;
  return t;
}

// Below this many columns (or rows) per thread, splitting costs more than it gains.
constexpr int64_t kMinColumnsPerThread = 64;

// ---- fast/: the direct kernel ----

// How the direct kernel runs one batch entry of g, when it can:
//  - op(B) = B (stored [K, N]): C = op(A) @ B, A read in place (transposed or not), N a
//    multiple of 16.
//  - op(B) = B^T (stored [N, K]): the kernel's rows are B's, C^T = B @ op(A)^T, written into
//    C transposed. op(A)^T is [K, M]: A itself when trans_a, else a transposed copy of A
//    (M*K floats: 200 KB for the MLP's first layer, against Eigen packing both operands,
//    its 800 KB weight included). M a multiple of 16.
struct DirectPlan {
  bool runs = false;
  bool copy_a_transposed = false;  // op(B) = B^T with A stored [M, K]
  int64_t rows = 0;                // the kernel's M: C's rows, or C's columns when transposed
};

// (whether it runs is cpu_dispatch.cpp's decision: gemm_direct_runs)
DirectPlan direct_plan(const GemmArgs& g) {
  if (!gemm_direct_runs(g)) return {};
  if (!g.trans_b) return {.runs = true, .rows = g.M};
  return {.runs = true, .copy_a_transposed = !g.trans_a, .rows = g.N};
}

// The kernel's arguments for its rows [r0, r1) of one batch entry (a: A, or its transposed
// copy when the plan made one).
gemm_direct::Gemm direct_rows(const GemmArgs& g, const float* a, const float* b, float* c,
                              int64_t r0, int64_t r1) {
  gemm_direct::Gemm d{.K = g.K, .accumulate = g.beta == 1.0f};
  d.M = r1 - r0;
  if (!g.trans_b) {
    d.N = g.N;
    d.a_row = g.trans_a ? 1 : g.K;
    d.a_step = g.trans_a ? g.M : 1;
    d.a = a + r0 * d.a_row;
    d.b = b;
    d.ldb = g.N;
    d.c = c + r0 * g.N;
    d.ldc = g.N;
    return d;
  }
  // C^T = B @ op(A)^T: B's rows [r0, r1), op(A)^T [K, M] row-major.
  d.N = g.M;
  d.a_row = g.K;
  d.a_step = 1;
  d.a = b + r0 * g.K;
  d.b = a;
  d.ldb = g.M;
  d.c = c + r0;
  d.ldc = g.N;
  d.transpose_c = true;
  return d;
}

void run_direct(GemmIsa isa, const gemm_direct::Gemm& d) {
#if defined(DPLAB_HAVE_AVX512_GEMM)
  if (isa == GemmIsa::Avx512) return gemm_direct::run_avx512(d);
#endif
  gemm_direct::run_baseline(d);
}

// The calling thread's buffer for a transposed copy of A, grown when too small and never
// cleared: a std::vector resized down for one layer and up for the next refills the
// difference with zeros (the MLP's step: 170 KB of memset for nothing).
float* transpose_scratch(int64_t floats) {
  thread_local std::unique_ptr<float[]> data;
  thread_local int64_t capacity = 0;
  if (capacity < floats) {
    data = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(floats));
    capacity = floats;
  }
  return data.get();
}

// Below this many multiply-adds, starting a parallel region costs more than it gains.
constexpr int64_t kMinSplitWork = int64_t{1} << 21;

void gemm_direct_batched(const GemmArgs& g, const DirectPlan& plan, const float* a, const float* b,
                         float* c) {
  const GemmIsa isa = gemm_isa();
  // Rows in parts of at least 16: each thread runs the kernel on its own rows of the kernel's
  // C. Every C[m, n] is summed in the same order whatever the split (fast/cpu_gemm_direct_kernel.h).
  const bool worth_it = g.M * g.N * g.K >= kMinSplitWork;
  const int parts =
      worth_it ? static_cast<int>(std::clamp<int64_t>(plan.rows / 16, 1, kernel_threads())) : 1;
  for (int64_t i = 0; i < g.batch; ++i) {
    const float *ai = a + i * g.stride_a, *bi = b + i * g.stride_b;
    float* ci = c + i * g.stride_c;
    if (plan.copy_a_transposed) {
      float* a_t = transpose_scratch(g.M * g.K);
      transpose_floats(ai, g.K, g.M, g.K, a_t, g.M);
      ai = a_t;
    }
    if (parts == 1) {
      run_direct(isa, direct_rows(g, ai, bi, ci, 0, plan.rows));
      continue;
    }
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int p = 0; p < parts; ++p)
      run_direct(isa,
                 direct_rows(g, ai, bi, ci, plan.rows * p / parts, plan.rows * (p + 1) / parts));
  }
}

// ---- reference/: Eigen ----

void gemm_batched(const GemmArgs& g, const float* a, const float* b, float* c) {
  const GemmIsa isa = gemm_isa();
  const int threads = kernel_threads();
  // Split C's columns between threads; where C is too narrow for that (a classifier's 10
  // outputs), its rows. Eigen never splits a GEMM itself (set_threads is 1, cpu_threads.cpp).
  const bool worth_it = g.M * g.N * g.K >= kMinSplitWork;
  const int column_parts =
      static_cast<int>(std::clamp<int64_t>(g.N / kMinColumnsPerThread, 1, threads));
  const int row_parts =
      static_cast<int>(std::clamp<int64_t>(g.M / kMinColumnsPerThread, 1, threads));
  const bool by_rows = column_parts == 1 && row_parts > 1 && worth_it;
  const int parts = by_rows ? row_parts : column_parts;
  for (int64_t i = 0; i < g.batch; ++i) {
    const float *ai = a + i * g.stride_a, *bi = b + i * g.stride_b;
    float* ci = c + i * g.stride_c;
    if (parts == 1) {
      run_tile(isa, column_tile(g, ai, bi, ci, 0, g.N));
      continue;
    }
    // Each thread owns a slice of C's columns (or rows).
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int p = 0; p < parts; ++p) {
      if (by_rows) {
        const int64_t m0 = g.M * p / parts, m1 = g.M * (p + 1) / parts;
        run_tile(isa, row_tile(g, ai, bi, ci, m0, m1 - m0));
      } else {
        const int64_t n0 = g.N * p / parts, n1 = g.N * (p + 1) / parts;
        run_tile(isa, column_tile(g, ai, bi, ci, n0, n1 - n0));
      }
    }
  }
}

}  // namespace

void CpuBackend::gemm(const GemmArgs& g, const float* a, const float* b, float* c) {
  DPLAB_CHECK(g.batch >= 0 && g.M >= 0 && g.N >= 0 && g.K >= 0,
              "gemm: expected non-negative sizes, got batch={} M={} N={} K={}", g.batch, g.M, g.N,
              g.K);
  // Batch entries that share C would race on it (and sum wrongly with beta != 0).
  DPLAB_CHECK(g.batch <= 1 || g.stride_c != 0,
              "gemm: stride_c is 0 for batch={}; every batch entry needs its own C", g.batch);
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  if (const DirectPlan plan = direct_plan(g); plan.runs)
    return gemm_direct_batched(g, plan, a, b, c);
  gemm_batched(g, a, b, c);
}

}  // namespace dplab
