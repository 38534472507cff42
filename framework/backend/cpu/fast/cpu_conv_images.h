// cpu_conv_images.h: the direct convolution's image loop, shared by the plain convolution
// (cpu_conv_direct.cpp) and the fused convolution + ReLU + max-pool (cpu_conv_fused.cpp).
// Both run the same kernels on the same channels-last copies of each image; they differ only
// in what happens to an image's output (from_hwc back to [O, oh, ow], or ReLU and pooling
// straight out of the kernel's buffer) and in where an image's output gradient comes from.
// In cpu_conv_direct.cpp. Read next: cpu_conv_fused.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "framework/backend/backend.h"

namespace dplab {

class CpuBackend;

namespace conv_images {

// A zero-padded channels-last image [rows, cols, Cs]. Its border and its channels past C
// are only ever zero, so they are cleared only when the geometry changes, not per image.
struct PaddedImage {
  std::vector<float> data;
  int64_t rows = -1, cols = -1, Cs = -1, C = -1;

  // data <- src [C, H, W], padded by ph rows and pw columns on each side.
  void load(const float* src, int64_t C_, int64_t H, int64_t W, int64_t ph, int64_t pw,
            int64_t Cs_);
  // Shapes data as [rows_, cols_, Cs_] for a caller that writes some of it itself (the fused
  // backward: every pixel a pooling window covers, channels below its C). All of it is zeroed
  // where the geometry or the previous user differs; what the caller never writes stays zero.
  void prepare_windows(int64_t rows_, int64_t cols_, int64_t Cs_);
};

// dst [C, L] <- src [L, Cs] (its first C channels), + bias[c] when there is one.
void from_hwc(const float* src, int64_t Cs, int64_t C, int64_t L, const float* bias, float* dst);

// Runs the forward kernel on every image (images shared between threads); store(n, out, O_pad)
// gets image n's output, out [out_h, out_w, O_pad] channels-last, without bias.
void forward_images(CpuBackend& cpu, const float* x, const float* weight, const Window2d& w,
                    int64_t O,
                    const std::function<void(int64_t n, const float* out, int64_t O_pad)>& store);

// Puts image n's output gradient into grad, as [out_h + 2*ph, out_w + 2*pw, O_pad] padded by
// ph, pw; where bias_sums is not null, adds its sum over pixels for every o < O into it.
using LoadGradient = std::function<void(int64_t n, PaddedImage& grad, int64_t ph, int64_t pw,
                                        int64_t O_pad, float* bias_sums)>;

// The backward kernels on every image: gx, gw, gb as conv2d_direct_backward's (each written
// unless null), the output gradient of each image from load_grad.
void backward_images(CpuBackend& cpu, const float* x, const float* weight, const Window2d& w,
                     int64_t O, float* gx, float* gw, float* gb, const LoadGradient& load_grad);

// sum_of(x, n)'s running sums: x[i] goes into sum lane_of(i, n) of 16 (the last n mod 16 into
// lane 0), and the sum is the lanes added in order. A caller that adds a few nonzero entries
// of a mostly-zero row the same way gets sum_of's result to the bit.
inline int lane_of(int64_t i, int64_t n) { return i < n / 16 * 16 ? static_cast<int>(i % 16) : 0; }
float sum_of(const float* x, int64_t n);
float add_lanes(const float (&part)[16]);

}  // namespace conv_images
}  // namespace dplab
