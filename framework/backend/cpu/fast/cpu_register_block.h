// cpu_register_block.h: the register block that dplab's own CPU kernels are built from, the
// direct convolution (cpu_conv_direct_kernel.cpp) and the direct GEMM (cpu_gemm_direct_kernel.cpp).
// A block of P x V accumulators, V vectors wide, stays in registers while K products are
// summed into it: for every k, load V vectors of one operand, broadcast P scalars of the
// other, P*V FMAs. The accumulators, the V loaded vectors and one broadcast fill the register
// file (16 vector registers with AVX2, 32 with AVX-512), which is what makes the loop
// compute-bound, and neither operand needs packing first: the scalars may sit at any strides.
// Written with GCC's vector extensions; the compiler emits FMAs (a*b + c, contracted).
//
// Included only by those two kernel files, which are compiled twice (AVX2 + FMA, and
// AVX-512; reference/cpu_gemm_eigen.h says why a second build must share no inline code with the first):
// everything here is in an anonymous namespace and uses nothing from the standard library.
#pragma once
#include <cstdint>

#if defined(DPLAB_GEMM_AVX512)
#define VECTOR_BYTES 64
#define VECTOR_REGISTERS 32
#else
#define VECTOR_BYTES 32
#define VECTOR_REGISTERS 16
#endif

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace dplab {
namespace {

typedef float Vec __attribute__((vector_size(VECTOR_BYTES)));
// the same vector, at any float's address (plain functions: see cpu_conv_pool.cpp's Floats8)
typedef float VecAny __attribute__((vector_size(VECTOR_BYTES), aligned(4), may_alias));
constexpr int kLanes = VECTOR_BYTES / 4;
// Blocks of up to 14 rows (pixels, window entries, rows of a matrix).
constexpr int kMaxBlock = 14;
// The most rows a block of V vectors can have: P * V + V + 1 <= registers.
constexpr int max_block(int V) {
  const int fit = (VECTOR_REGISTERS - V - 1) / V;
  return fit < kMaxBlock ? fit : kMaxBlock;
}

inline Vec load(const float* p) { return *reinterpret_cast<const VecAny*>(p); }
inline void store(float* p, Vec v) { *reinterpret_cast<VecAny*>(p) = v; }
// x in every lane. (Vec{} + x would be exact too, but GCC keeps the + 0.0f, which is not a
// no-op for -0.0: an add and a shuffle before every FMA instead of one broadcast load.)
inline Vec broadcast(const float* x) {
#if VECTOR_BYTES == 64
  return reinterpret_cast<Vec>(_mm512_set1_ps(*x));
#elif defined(__AVX__)
  return reinterpret_cast<Vec>(_mm256_set1_ps(*x));
#else
  return Vec{} + *x;
#endif
}

// Loops over a block's P x V accumulators must be unrolled (`DPLAB_UNROLL`) before GCC decides
// whether the array can live in registers: one left rolled, in clear() or in a caller's store
// loop, and GCC keeps the array on the stack, copying all P*V vectors there before and after
// the k loop. Those copies cost most where K is small (a weight gradient's K is the batch).
#define DPLAB_UNROLL _Pragma("GCC unroll 16")

// acc[p][v] += sum over k < K of a[p * a_row + k * a_step] * b[k * b_step + v * kLanes ...]:
// P rows of scalars times V vectors, summed in the order k = 0, 1, ... (so a result does not
// depend on how the rows and columns around it were blocked).
template <int P, int V>
inline void multiply_accumulate(Vec (&acc)[P][V], const float* a, int64_t a_row, int64_t a_step,
                                const float* b, int64_t b_step, int64_t K) {
  for (int64_t k = 0; k < K; ++k, a += a_step, b += b_step) {
    Vec bv[V];
    DPLAB_UNROLL for (int v = 0; v < V; ++v) bv[v] = load(b + v * kLanes);
    DPLAB_UNROLL for (int p = 0; p < P; ++p) {
      const Vec ab = broadcast(a + p * a_row);
      DPLAB_UNROLL for (int v = 0; v < V; ++v) acc[p][v] += ab * bv[v];
    }
  }
}

template <int P, int V>
inline void clear(Vec (&acc)[P][V]) {
  DPLAB_UNROLL for (int p = 0; p < P; ++p) DPLAB_UNROLL for (int v = 0; v < V; ++v) acc[p][v] =
      Vec{};
}

// Splits [0, total) into the fewest blocks of at most `most`, of near-equal sizes (14 = 14,
// 28 = 14 + 14, 15 = 8 + 7 rather than 14 + 1: a block of 1 would leave the FMA units idle).
template <typename Body>
void for_blocks(int64_t total, int most, Body body) {
  const int64_t count = (total + most - 1) / most;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t first = total * b / count, last = total * (b + 1) / count;
    body(first, static_cast<int>(last - first));
  }
}

// Columns [0, width) (a multiple of kLanes) in steps of V vectors while V remain, then the
// rest in one step of fewer: body(first column, vectors).
template <int V, typename Body>
void for_column_blocks(int64_t width, Body body) {
  int64_t first = 0;
  for (; first + V * kLanes <= width; first += V * kLanes) body(first, V);
  if (first < width) body(first, static_cast<int>((width - first) / kLanes));
}

}  // namespace
}  // namespace dplab
