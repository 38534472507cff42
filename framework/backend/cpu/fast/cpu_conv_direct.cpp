// cpu_conv_direct.cpp: 2-d convolution on the CPU without im2col columns, forward and both
// backward passes, one image at a time, images shared between threads (run_pieces).
// Each image is copied once into a zero-padded channels-last buffer [H + 2p, W + 2p, C]
// (C*H*W floats, where im2col writes kh*kw times as many), and the kernels
// (cpu_conv_direct_kernel.cpp) read their windows straight out of it:
//   forward      y[n]  = conv(x[n], W)                 out [oh, ow, O_pad] -> y [O, oh, ow] + b
//   input grad   gx[n] = conv(gy[n] padded by k-1-p, W flipped, in and out channels swapped)
//                (stride 1 only: a strided input gradient falls back to col2im)
//   weight grad  gW   += sum over pixels of x window (x) gy pixel, per image, summed per thread
//   bias grad    gb    = sum of gy over n, h, w
// The input gradient is the forward kernel again:
//   gx[h, w, c] = sum_{o,i,j} gy[h + p - i, w + p - j, o] W[o, c, i, j]
//               = sum_{o,i',j'} gy_pad[h + i', w + j', o] W[o, c, kh-1-i', kw-1-j']
// with gy_pad = gy padded by kh-1-p (i' = kh-1-i). Flops are im2col + GEMM's; the memory
// traffic is the image and its gradient, not their columns.
// Whether it runs is cpu_dispatch.cpp's decision (conv_direct_runs: DPLAB_CONV, and the
// windows it handles); where it declines (the input gradient of a strided convolution,
// padding wider than the kernel, empty tensors) the reference runs.
// Read next: cpu_conv_direct_kernel.h; the reference is ops/conv2d_im2col.cpp over
// reference/cpu_conv_pool.cpp.
#include <algorithm>
#include <vector>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/backend/cpu/cpu_vector.h"
#include "framework/backend/cpu/fast/cpu_conv_direct_kernel.h"
#include "framework/backend/cpu/fast/cpu_conv_images.h"

namespace dplab {
namespace {

using conv_kernel::kOutBlock;

struct Kernels {
  void (*forward)(const conv_kernel::Forward&);
  void (*weight_grad)(const conv_kernel::WeightGrad&);
};

// The build the GEMM runs (cpu_dispatch.h's DPLAB_GEMM_ISA), so one setting picks both.
Kernels kernels() {
#if defined(DPLAB_HAVE_AVX512_GEMM)
  if (gemm_isa() == GemmIsa::Avx512)
    return {conv_kernel::forward_avx512, conv_kernel::weight_grad_avx512};
#endif
  return {conv_kernel::forward_baseline, conv_kernel::weight_grad_baseline};
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// weight [O, C, kh, kw] -> packed [kh, kw, C, O_pad] (forward), zeros for o >= O.
std::vector<float> pack_forward_weight(const float* weight, const Window2d& w, int64_t O,
                                       int64_t O_pad) {
  std::vector<float> packed(static_cast<std::size_t>(w.kh * w.kw * w.C * O_pad), 0.0f);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < w.C; ++c)
      for (int64_t i = 0; i < w.kh; ++i)
        for (int64_t j = 0; j < w.kw; ++j)
          packed[static_cast<std::size_t>(((i * w.kw + j) * w.C + c) * O_pad + o)] =
              weight[((o * w.C + c) * w.kh + i) * w.kw + j];
  return packed;
}

// weight [O, C, kh, kw] -> packed [kh, kw, O_pad, C_pad], flipped: the input gradient's weight
// (gy's O channels in, x's C channels out), tap (i', j') = (kh-1-i, kw-1-j).
std::vector<float> pack_input_grad_weight(const float* weight, const Window2d& w, int64_t O,
                                          int64_t O_pad, int64_t C_pad) {
  std::vector<float> packed(static_cast<std::size_t>(w.kh * w.kw * O_pad * C_pad), 0.0f);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < w.C; ++c)
      for (int64_t i = 0; i < w.kh; ++i)
        for (int64_t j = 0; j < w.kw; ++j)
          packed[static_cast<std::size_t>(
              (((w.kh - 1 - i) * w.kw + (w.kw - 1 - j)) * O_pad + o) * C_pad + c)] =
              weight[((o * w.C + c) * w.kh + i) * w.kw + j];
  return packed;
}

// Scratch buffers of the thread running an image (run_pieces' lanes are threads).
struct Scratch {
  conv_images::PaddedImage in, grad;
  std::vector<float> out;
  static Scratch& mine() {
    thread_local Scratch s;
    return s;
  }
};

}  // namespace

namespace conv_images {

// dst [C, L] <- src [L, Cs] (its first C channels), + bias[c] when there is one.
void from_hwc(const float* src, int64_t Cs, int64_t C, int64_t L, const float* bias, float* dst) {
  transpose_floats(src, Cs, L, C, dst, L);
  if (bias == nullptr) return;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = 0; p < L; ++p) dst[c * L + p] += bias[c];
}

void PaddedImage::load(const float* src, int64_t C_, int64_t H, int64_t W, int64_t ph, int64_t pw,
                       int64_t Cs_) {
  if (rows != H + 2 * ph || cols != W + 2 * pw || Cs != Cs_ || C != C_) {
    rows = H + 2 * ph, cols = W + 2 * pw, Cs = Cs_, C = C_;
    data.assign(static_cast<std::size_t>(rows * cols * Cs), 0.0f);
  }
  for (int64_t h = 0; h < H; ++h) {
    float* out = data.data() + ((h + ph) * cols + pw) * Cs;
    if (C == 1) {  // the images themselves (LeNet's first layer): a row copy
      std::copy_n(src + h * W, W, out);
    } else {  // row h of every channel, [C, W] with rows H*W apart -> [W, Cs]
      transpose_floats(src + h * W, H * W, C, W, out, Cs);
    }
  }
}

void PaddedImage::prepare_windows(int64_t rows_, int64_t cols_, int64_t Cs_) {
  constexpr int64_t kWindows = -2;  // C's mark for this use: load() clears after it
  if (rows == rows_ && cols == cols_ && Cs == Cs_ && C == kWindows) return;
  rows = rows_, cols = cols_, Cs = Cs_, C = kWindows;
  data.assign(static_cast<std::size_t>(rows * cols * Cs), 0.0f);
}

// x[0] + ... + x[n-1] in 16 running sums: one sum would be a chain of n dependent adds
// (4 cycles each), slow enough to show in a step for LeNet's first layer's bias gradient.
// (x[i] goes into part[lane_of(i, n)], in two loops so the first vectorises.)
float sum_of(const float* x, int64_t n) {
  float part[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) part[k] += x[i + k];
  for (; i < n; ++i) part[0] += x[i];
  return add_lanes(part);
}

float add_lanes(const float (&part)[16]) {
  float t = 0.0f;
  for (float p : part) t += p;
  return t;
}

void forward_images(CpuBackend& cpu, const float* x, const float* weight, const Window2d& w,
                    int64_t O,
                    const std::function<void(int64_t n, const float* out, int64_t O_pad)>& store) {
  const Kernels k = kernels();
  const int64_t O_pad = round_up(O, kOutBlock), L = w.out_h * w.out_w, image = w.C * w.H * w.W;
  const std::vector<float> packed = pack_forward_weight(weight, w, O, O_pad);
  const int lanes = static_cast<int>(std::min<int64_t>(kernel_threads(), w.N));
  cpu.run_pieces(w.N, lanes, [&](int64_t n, int) {
    Scratch& s = Scratch::mine();
    s.in.load(x + n * image, w.C, w.H, w.W, w.pad, w.pad, w.C);
    s.out.resize(static_cast<std::size_t>(L * O_pad));
    k.forward({.in = s.in.data.data(),
               .in_cols = w.W + 2 * w.pad,
               .C = w.C,
               .weight = packed.data(),
               .O_pad = O_pad,
               .kh = w.kh,
               .kw = w.kw,
               .stride = w.stride,
               .out = s.out.data(),
               .out_h = w.out_h,
               .out_w = w.out_w});
    store(n, s.out.data(), O_pad);
  });
}

void backward_images(CpuBackend& cpu, const float* x, const float* weight, const Window2d& w,
                     int64_t O, float* gx, float* gw, float* gb, const LoadGradient& load_grad) {
  const Kernels k = kernels();
  const int64_t O_pad = round_up(O, kOutBlock), C_pad = round_up(w.C, kOutBlock);
  const int64_t image = w.C * w.H * w.W;
  // gy is padded for the input gradient; the weight gradient reads its interior.
  const int64_t ph = gx != nullptr ? w.kh - 1 - w.pad : 0,
                pw = gx != nullptr ? w.kw - 1 - w.pad : 0;
  const int64_t gy_cols = w.out_w + 2 * pw;
  const std::vector<float> flipped =
      gx != nullptr ? pack_input_grad_weight(weight, w, O, O_pad, C_pad) : std::vector<float>();
  const int lanes = static_cast<int>(std::min<int64_t>(kernel_threads(), w.N));
  // Each lane sums its images' weight and bias gradients on its own; lanes are added in order.
  const int64_t taps = w.kh * w.kw * w.C;
  std::vector<std::vector<float>> gw_lane(
      static_cast<std::size_t>(gw != nullptr ? lanes : 0),
      std::vector<float>(static_cast<std::size_t>(taps * O_pad)));
  std::vector<std::vector<float>> gb_lane(static_cast<std::size_t>(gb != nullptr ? lanes : 0),
                                          std::vector<float>(static_cast<std::size_t>(O)));
  cpu.run_pieces(w.N, lanes, [&](int64_t n, int lane) {
    Scratch& s = Scratch::mine();
    load_grad(n, s.grad, ph, pw, O_pad,
              gb != nullptr ? gb_lane[static_cast<std::size_t>(lane)].data() : nullptr);
    if (gx != nullptr) {
      s.out.resize(static_cast<std::size_t>(w.H * w.W * C_pad));
      k.forward({.in = s.grad.data.data(),
                 .in_cols = gy_cols,
                 .C = O_pad,
                 .weight = flipped.data(),
                 .O_pad = C_pad,
                 .kh = w.kh,
                 .kw = w.kw,
                 .stride = 1,
                 .out = s.out.data(),
                 .out_h = w.H,
                 .out_w = w.W});
      from_hwc(s.out.data(), C_pad, w.C, w.H * w.W, nullptr, gx + n * image);
    }
    if (gw != nullptr) {
      s.in.load(x + n * image, w.C, w.H, w.W, w.pad, w.pad, w.C);
      k.weight_grad({.in = s.in.data.data(),
                     .in_cols = w.W + 2 * w.pad,
                     .C = w.C,
                     .gout = s.grad.data.data() + (ph * gy_cols + pw) * O_pad,
                     .gout_row_stride = gy_cols * O_pad,
                     .O_pad = O_pad,
                     .kh = w.kh,
                     .kw = w.kw,
                     .stride = w.stride,
                     .out_h = w.out_h,
                     .out_w = w.out_w,
                     .gweight = gw_lane[static_cast<std::size_t>(lane)].data()});
    }
  });
  if (gw != nullptr) {  // [kh, kw, C, O_pad] summed over lanes -> [O, C, kh, kw]
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < w.C; ++c)
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j) {
            float t = 0.0f;
            for (const std::vector<float>& part : gw_lane)
              t += part[static_cast<std::size_t>(((i * w.kw + j) * w.C + c) * O_pad + o)];
            gw[((o * w.C + c) * w.kh + i) * w.kw + j] = t;
          }
  }
  if (gb != nullptr) {
    for (int64_t o = 0; o < O; ++o) {
      float t = 0.0f;
      for (const std::vector<float>& part : gb_lane) t += part[static_cast<std::size_t>(o)];
      gb[o] = t;
    }
  }
}

}  // namespace conv_images

bool CpuBackend::conv2d_direct(const float* x, const float* weight, const float* bias,
                               const Window2d& w, int64_t O, float* y) {
  if (!conv_direct_runs(w, O, /*input_grad=*/false)) return false;  // cpu_dispatch.cpp decides
  const int64_t L = w.out_h * w.out_w;
  conv_images::forward_images(*this, x, weight, w, O,
                              [&](int64_t n, const float* out, int64_t O_pad) {
    conv_images::from_hwc(out, O_pad, O, L, bias, y + n * O * L);
  });
  return true;
}

bool CpuBackend::conv2d_direct_backward(const float* gy, const float* x, const float* weight,
                                        const Window2d& w, int64_t O, float* gx, float* gw,
                                        float* gb) {
  if (!conv_direct_runs(w, O, /*input_grad=*/gx != nullptr)) return false;
  const int64_t L = w.out_h * w.out_w;
  conv_images::backward_images(*this, x, weight, w, O, gx, gw, gb,
                               [&](int64_t n, conv_images::PaddedImage& grad, int64_t ph,
                                   int64_t pw, int64_t O_pad, float* sums) {
    const float* gy_n = gy + n * O * L;
    grad.load(gy_n, O, w.out_h, w.out_w, ph, pw, O_pad);
    if (sums != nullptr)
      for (int64_t o = 0; o < O; ++o) sums[o] += conv_images::sum_of(gy_n + o * L, L);
  });
  return true;
}

}  // namespace dplab
