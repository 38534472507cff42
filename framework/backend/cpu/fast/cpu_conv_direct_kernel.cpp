// cpu_conv_direct_kernel.cpp: the direct convolution's inner loops (layouts in the header).
// Both are a GEMM whose operand is read straight out of the padded image instead of from
// im2col's columns, one register block (cpu_register_block.h) per block of outputs:
//  - forward: P output pixels of one row x V vectors of output channels, summed over the
//    window entries (i, j, c): for each row tap i, the V weight vectors of an entry times the
//    P pixels' inputs (a pixel_step apart).
//  - weight gradient: R window entries x V vectors of output channels, summed over every
//    output pixel: the pixel's V gradient vectors times its R inputs.
// This file is compiled twice (see cpu_conv_direct_kernel.h); everything but the entry points
// is in an anonymous namespace and uses nothing from the standard library, so the AVX-512
// build shares no inline code with the baseline (tests/build/check_isa_symbols.sh).
#if defined(DPLAB_GEMM_AVX512)
#define KERNEL_NAME(name) name##_avx512
#else
#define KERNEL_NAME(name) name##_baseline
#endif

#include "framework/backend/cpu/fast/cpu_conv_direct_kernel.h"
#include "framework/backend/cpu/fast/cpu_register_block.h"

namespace dplab::conv_kernel {
namespace {

// Blocks of up to V = 2 vectors of output channels.
constexpr int kMaxV = 2;

// out[oh, ow0 + p, o0 + v*kLanes ...] for p < P, v < V.
template <int P, int V>
void forward_block(const Forward& f, int64_t oh, int64_t ow0, int64_t o0) {
  Vec acc[P][V];
  clear(acc);
  const int64_t run = f.kw * f.C, pixel_step = f.stride * f.C;
  for (int64_t i = 0; i < f.kh; ++i) {
    // the window entries (j, c) of row tap i: one run in the input and in the weight
    const float* x = f.in + ((oh * f.stride + i) * f.in_cols + ow0 * f.stride) * f.C;
    const float* w = f.weight + i * run * f.O_pad + o0;
    multiply_accumulate(acc, x, pixel_step, 1, w, f.O_pad, run);
  }
  float* out = f.out + (oh * f.out_w + ow0) * f.O_pad + o0;
  DPLAB_UNROLL for (int p = 0; p < P; ++p) DPLAB_UNROLL for (int v = 0; v < V; ++v)
      store(out + p * f.O_pad + v * kLanes, acc[p][v]);
}

// gweight[i, e0 + r, o0 + v*kLanes ...] += for r < R, v < V, where e = j*C + c runs over
// row tap i's window entries.
template <int R, int V>
void weight_grad_block(const WeightGrad& g, int64_t i, int64_t e0, int64_t o0) {
  Vec acc[R][V];
  clear(acc);
  const int64_t pixel_step = g.stride * g.C;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const float* x = g.in + (oh * g.stride + i) * g.in_cols * g.C + e0;
    const float* gy = g.gout + oh * g.gout_row_stride + o0;
    multiply_accumulate(acc, x, 1, pixel_step, gy, g.O_pad, g.out_w);
  }
  float* gw = g.gweight + (i * g.kw * g.C + e0) * g.O_pad + o0;
  DPLAB_UNROLL for (int r = 0; r < R; ++r) DPLAB_UNROLL for (int v = 0; v < V; ++v)
      store(gw + r * g.O_pad + v * kLanes, load(gw + r * g.O_pad + v * kLanes) + acc[r][v]);
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

}  // namespace

void KERNEL_NAME(forward)(const Forward& f) {
  for_column_blocks<kMaxV>(f.O_pad, [&](int64_t o0, int V) {
    for (int64_t oh = 0; oh < f.out_h; ++oh)
      for_blocks(f.out_w, max_block(V), [&](int64_t ow0, int n) {
        if (V == 2) forward_n<2>(n, f, oh, ow0, o0);
        else forward_n<1>(n, f, oh, ow0, o0);
      });
  });
}

void KERNEL_NAME(weight_grad)(const WeightGrad& g) {
  const int64_t run = g.kw * g.C;
  for_column_blocks<kMaxV>(g.O_pad, [&](int64_t o0, int V) {
    for (int64_t i = 0; i < g.kh; ++i)
      for_blocks(run, max_block(V), [&](int64_t e0, int n) {
        if (V == 2) weight_grad_n<2>(n, g, i, e0, o0);
        else weight_grad_n<1>(n, g, i, e0, o0);
      });
  });
}

}  // namespace dplab::conv_kernel
