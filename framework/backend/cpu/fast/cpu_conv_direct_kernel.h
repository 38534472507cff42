// cpu_conv_direct_kernel.h: the register-blocked inner loops of the direct convolution, on one
// image in a channels-last layout, built twice (AVX2 + FMA, and AVX-512) like the GEMM kernel
// (reference/cpu_gemm_eigen.h says why a second build must share no inline code with the first).
// cpu_conv_direct.cpp lays the data out, picks a build and shares images between threads.
// Layouts (all row-major, channels innermost, O_pad a multiple of kOutBlock):
//   in:     [rows, cols, C]              the input image, already zero-padded
//   weight: [kh, kw, C, O_pad]           tap (i, j), input channel c -> O_pad outputs
//   out:    [out_h, out_w, O_pad]
// For a fixed row tap i, the window entries (j, c) lie next to each other both in the input
// (at (ow*stride + j)*C + c) and in the weight (row (i*kw + j)*C + c): one run of kw*C.
// Read next: cpu_conv_direct_kernel.cpp.
#pragma once
#include <cstdint>

namespace dplab::conv_kernel {

// Output channels are padded (with zero weights) to a multiple of this: a whole AVX-512
// vector, or two AVX2 vectors.
inline constexpr int64_t kOutBlock = 16;

// out[oh, ow, o] = sum over i, j, c of in[oh*stride + i, ow*stride + j, c] * weight[i, j, c, o]
// (out is overwritten).
struct Forward {
  const float* in = nullptr;
  int64_t in_cols = 0, C = 0;
  const float* weight = nullptr;
  int64_t O_pad = 0, kh = 0, kw = 0, stride = 1;
  float* out = nullptr;
  int64_t out_h = 0, out_w = 0;
};

// gweight[i, j, c, o] += sum over oh, ow of in[oh*stride + i, ow*stride + j, c] * gout[oh, ow, o]
// gout's rows are gout_row_stride floats apart (it may sit inside a padded buffer).
struct WeightGrad {
  const float* in = nullptr;
  int64_t in_cols = 0, C = 0;
  const float* gout = nullptr;
  int64_t gout_row_stride = 0;
  int64_t O_pad = 0, kh = 0, kw = 0, stride = 1, out_h = 0, out_w = 0;
  float* gweight = nullptr;
};

void forward_baseline(const Forward& f);
void weight_grad_baseline(const WeightGrad& g);
#ifdef DPLAB_HAVE_AVX512_GEMM
void forward_avx512(const Forward& f);
void weight_grad_avx512(const WeightGrad& g);
#endif

}  // namespace dplab::conv_kernel
