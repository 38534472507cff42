// cpu_conv_direct_kernel.cpp: the direct convolution's inner loops (layouts in the header).
// Both are a GEMM whose operand is read straight out of the padded image instead of from
// im2col's columns, with a block of outputs held in registers:
//  - forward: P output pixels of one row x V vectors of output channels. For every window
//    entry (i, j, c): load V weight vectors, broadcast the P inputs, P*V FMAs.
//  - weight gradient: R window entries x V vectors of output channels, summed over every
//    output pixel: load the pixel's V gradient vectors, broadcast its R inputs, R*V FMAs.
// P*V (or R*V) accumulators plus the loaded vectors fill the register file (16 vector
// registers with AVX2, 32 with AVX-512), which is what makes the loop compute-bound.
// Written with GCC's vector extensions; the compiler emits FMAs (a*b + c, contracted).
// This file is compiled twice (see cpu_conv_direct_kernel.h); everything but the entry points
// is in an anonymous namespace and uses nothing from the standard library, so the AVX-512
// build shares no inline code with the baseline (tests/build/check_isa_symbols.sh).
#if defined(DPLAB_GEMM_AVX512)
#define KERNEL_NAME(name) name##_avx512
#define VECTOR_BYTES 64
#define VECTOR_REGISTERS 32
#else
#define KERNEL_NAME(name) name##_baseline
#define VECTOR_BYTES 32
#define VECTOR_REGISTERS 16
#endif

#include "framework/backend/cpu/cpu_conv_direct_kernel.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace dplab::conv_kernel {
namespace {

typedef float Vec __attribute__((vector_size(VECTOR_BYTES)));
// the same vector, at any float's address (plain functions: see cpu_conv_pool.cpp's Floats8)
typedef float VecAny __attribute__((vector_size(VECTOR_BYTES), aligned(4), may_alias));
constexpr int kLanes = VECTOR_BYTES / 4;
// Blocks of up to V = 2 vectors of output channels, and of up to 14 pixels or entries.
constexpr int kMaxV = 2, kMaxBlock = 14;
// Accumulators fit when block * V + V + 1 (the vectors loaded, one broadcast) <= registers.
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

// out[oh, ow0 + p, o0 + v*kLanes ...] for p < P, v < V.
template <int P, int V>
void forward_block(const Forward& f, int64_t oh, int64_t ow0, int64_t o0) {
  Vec acc[P][V];
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < V; ++v) acc[p][v] = Vec{};
  const int64_t C = f.C, run = f.kw * C, pixel_step = f.stride * C;
  for (int64_t i = 0; i < f.kh; ++i) {
    // the window entries (j, c) of row tap i: one run in the input and in the weight
    const float* x = f.in + ((oh * f.stride + i) * f.in_cols + ow0 * f.stride) * C;
    const float* w = f.weight + i * run * f.O_pad + o0;
    for (int64_t e = 0; e < run; ++e, ++x, w += f.O_pad) {
      Vec wv[V];
      for (int v = 0; v < V; ++v) wv[v] = load(w + v * kLanes);
      for (int p = 0; p < P; ++p) {
        const Vec xb = broadcast(x + p * pixel_step);
        for (int v = 0; v < V; ++v) acc[p][v] += xb * wv[v];
      }
    }
  }
  float* out = f.out + (oh * f.out_w + ow0) * f.O_pad + o0;
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < V; ++v) store(out + p * f.O_pad + v * kLanes, acc[p][v]);
}

// gweight[i, e0 + r, o0 + v*kLanes ...] += for r < R, v < V, where e = j*C + c runs over
// row tap i's window entries.
template <int R, int V>
void weight_grad_block(const WeightGrad& g, int64_t i, int64_t e0, int64_t o0) {
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = Vec{};
  const int64_t pixel_step = g.stride * g.C;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const float* x = g.in + (oh * g.stride + i) * g.in_cols * g.C + e0;
    const float* gy = g.gout + oh * g.gout_row_stride + o0;
    for (int64_t ow = 0; ow < g.out_w; ++ow, x += pixel_step, gy += g.O_pad) {
      Vec gv[V];
      for (int v = 0; v < V; ++v) gv[v] = load(gy + v * kLanes);
      for (int r = 0; r < R; ++r) {
        const Vec xb = broadcast(x + r);
        for (int v = 0; v < V; ++v) acc[r][v] += xb * gv[v];
      }
    }
  }
  float* gw = g.gweight + (i * g.kw * g.C + e0) * g.O_pad + o0;
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) store(gw + r * g.O_pad + v * kLanes, load(gw + r * g.O_pad + v * kLanes) + acc[r][v]);
}

// The block for a run-time size n in [1, max_block(V)]: a switch over the instantiations.
template <int V, int N = max_block(V)>
void forward_n(int n, const Forward& f, int64_t oh, int64_t ow0, int64_t o0) {
  if constexpr (N >= 1) {
    if (n == N) return forward_block<N, V>(f, oh, ow0, o0);
    forward_n<V, N - 1>(n, f, oh, ow0, o0);
  }
}
template <int V, int N = max_block(V)>
void weight_grad_n(int n, const WeightGrad& g, int64_t i, int64_t e0, int64_t o0) {
  if constexpr (N >= 1) {
    if (n == N) return weight_grad_block<N, V>(g, i, e0, o0);
    weight_grad_n<V, N - 1>(n, g, i, e0, o0);
  }
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

// Output channels in steps of V = 2 vectors while two remain, then V = 1.
template <typename Body>
void for_channel_blocks(int64_t O_pad, Body body) {
  int64_t o0 = 0;
  for (; o0 + kMaxV * kLanes <= O_pad; o0 += kMaxV * kLanes) body(o0, kMaxV);
  for (; o0 < O_pad; o0 += kLanes) body(o0, 1);
}

}  // namespace

void KERNEL_NAME(forward)(const Forward& f) {
  for_channel_blocks(f.O_pad, [&](int64_t o0, int V) {
    for (int64_t oh = 0; oh < f.out_h; ++oh)
      for_blocks(f.out_w, max_block(V), [&](int64_t ow0, int n) {
        if (V == 2) forward_n<2>(n, f, oh, ow0, o0);
        else forward_n<1>(n, f, oh, ow0, o0);
      });
  });
}

void KERNEL_NAME(weight_grad)(const WeightGrad& g) {
  const int64_t run = g.kw * g.C;
  for_channel_blocks(g.O_pad, [&](int64_t o0, int V) {
    for (int64_t i = 0; i < g.kh; ++i)
      for_blocks(run, max_block(V), [&](int64_t e0, int n) {
        if (V == 2) weight_grad_n<2>(n, g, i, e0, o0);
        else weight_grad_n<1>(n, g, i, e0, o0);
      });
  });
}

}  // namespace dplab::conv_kernel
