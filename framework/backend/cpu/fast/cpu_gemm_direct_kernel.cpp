// cpu_gemm_direct_kernel.cpp: C = A @ B (or C += A @ B), one register block
// (cpu_register_block.h) of P rows x V vectors of C at a time: for every k, V vectors of B's
// row k and P scalars of A's column k. A block's slice of B (K rows of V vectors) is read
// again by every block below it, from the L1 or L2 cache; A's P rows are read once per
// column of blocks. Nothing is copied first, and C is written once, so beta = 0 needs no
// zeroing pass: at the MLP's batch of 64, Eigen's packing of the operands is a visible part
// of the work, and this kernel runs the MLP's GEMMs near the FMA units' peak. In a weight
// gradient K is the batch, so a block's start and end count: the accumulators must stay in
// registers from clear() to the store (DPLAB_UNROLL, cpu_register_block.h). Measured:
// docs/measurements/cpu_training.md.
// This file is compiled twice (see cpu_gemm_direct_kernel.h); everything but the entry point
// is in an anonymous namespace and uses nothing from the standard library.
#if defined(DPLAB_GEMM_AVX512)
#define KERNEL_NAME(name) name##_avx512
#else
#define KERNEL_NAME(name) name##_baseline
#endif

#include "framework/backend/cpu/fast/cpu_gemm_direct_kernel.h"
#include "framework/backend/cpu/fast/cpu_register_block.h"

namespace dplab::gemm_direct {
namespace {

// Blocks of V = 4 vectors (64 columns) x 6 rows with AVX-512; 2 vectors x 6 rows with AVX2
// (whose 12 accumulators lost to Eigen's packed kernel, so Auto leaves that build to Eigen:
// cpu_dispatch.h). Wider blocks read A fewer times: 4 x 6 ran the weight gradient faster than
// 2 x 14.
constexpr int kMaxV = VECTOR_REGISTERS == 32 ? 4 : 2;
static_assert(kColumnBlock % kLanes == 0);

// C's rows [m0, m0 + P) x columns [n0, n0 + V * kLanes).
template <int P, int V>
void block(const Gemm& g, int64_t m0, int64_t n0) {
  Vec acc[P][V];
  clear(acc);
  multiply_accumulate(acc, g.a + m0 * g.a_row, g.a_row, g.a_step, g.b + n0, g.ldb, g.K);
  if (!g.transpose_c) {
    float* c = g.c + m0 * g.ldc + n0;
    DPLAB_UNROLL for (int p = 0; p < P; ++p) DPLAB_UNROLL for (int v = 0; v < V; ++v) {
      float* cv = c + p * g.ldc + v * kLanes;
      store(cv, g.accumulate ? load(cv) + acc[p][v] : acc[p][v]);
    }
    return;
  }
  // C stored transposed: through a small tile, P floats to each of C's stored rows.
  float tile[P][V * kLanes];
  DPLAB_UNROLL for (int p = 0; p < P; ++p) DPLAB_UNROLL for (int v = 0; v < V; ++v)
      store(&tile[p][v * kLanes], acc[p][v]);
  for (int n = 0; n < V * kLanes; ++n) {
    float* c = g.c + (n0 + n) * g.ldc + m0;
    for (int p = 0; p < P; ++p) c[p] = g.accumulate ? c[p] + tile[p][n] : tile[p][n];
  }
}

// The block for run-time sizes: switches over the instantiations (P <= max_block(V)).
template <int V, int P = max_block(V)>
void block_rows(int rows, const Gemm& g, int64_t m0, int64_t n0) {
  if constexpr (P >= 1) {
    if (rows == P) return block<P, V>(g, m0, n0);
    block_rows<V, P - 1>(rows, g, m0, n0);
  }
}
template <int V = kMaxV>
void block_of(int vectors, int rows, const Gemm& g, int64_t m0, int64_t n0) {
  if constexpr (V >= 1) {
    if (vectors == V) return block_rows<V>(rows, g, m0, n0);
    block_of<V - 1>(vectors, rows, g, m0, n0);
  }
}

}  // namespace

void KERNEL_NAME(run)(const Gemm& g) {
  // Columns of blocks outermost: a column's slice of B stays in cache while its rows run.
  for_column_blocks<kMaxV>(g.N, [&](int64_t n0, int vectors) {
    for_blocks(g.M, max_block(vectors),
               [&](int64_t m0, int rows) { block_of(vectors, rows, g, m0, n0); });
  });
}

}  // namespace dplab::gemm_direct
