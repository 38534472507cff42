// cpu_conv_fused.cpp: convolution, ReLU and a 2x2 max-pool of stride 2 as one op on the CPU
// (ops/nn_conv.cpp's conv2d_relu_max_pool2d, which LeNet's two stages call).
// Forward: the direct kernel's output for one image, [oh, ow, O_pad] channels-last, is still
// in this thread's cache; each 2x2 window is read from it, biased, ReLU'd and reduced to its
// maximum there. Unfused, that output is transposed to [O, oh, ow] and written out (conv2d),
// read and written again (relu), and read once more (max_pool2d): three passes over a tensor
// 4x the pooled one, and 4.8 MB a step of LeNet's activations kept for backward.
// Backward: the gradient reaches only each window's winner, and only where the ReLU let it
// through: y > 0, as y = relu(v) at the winner. It is written straight into the padded
// channels-last buffer the backward kernels read (conv_images::backward_images); unfused, the
// pool's backward writes a full-size gradient, the ReLU's backward another, and the
// convolution transposes that into the same buffer.
// The numbers are the unfused ops', to the bit: the same sums, the same tie rule as
// max_pool2x2 (reference/cpu_conv_pool.cpp), the bias gradient summed as sum_of sums a full plane.
// tests/backend/test_cpu_conv_fused.cpp compares the two. Read next: ops/nn_conv.cpp.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cpu/cpu_vector.h"
#include "framework/backend/cpu/fast/cpu_conv_images.h"

namespace dplab {
namespace {

using conv_images::PaddedImage;

// ReLU as the unfused op computes it (Eigen's max(x, 0): x unless x < 0, so NaN stays NaN).
inline float relu(float v) { return v < 0.0f ? 0.0f : v; }

// route's "the ReLU stopped it": no winner gets the gradient.
constexpr uint8_t kStopped = 4;

// Per-thread tiles of one image, channels last: the pooled outputs before they are
// transposed to [O, PL], and the output gradient after it is transposed from [O, PL].
struct Tiles {
  std::vector<float> pooled;
  std::vector<int32_t> winner;  // one window's route, before it is narrowed to bytes
  static Tiles& mine() {
    thread_local Tiles t;
    return t;
  }
};

// One image: y [O, PL] (PL = out_h/2 * out_w/2) and route [PL, O] from the kernel's output
// out [out_h, out_w, O_pad]. Per window, a tournament as in max_pool2x2: the top pair, the
// bottom pair, then the two winners; ties keep the earlier. The channels of a window are
// contiguous in out, so the inner loop runs over them (vectorised) into a channels-last tile,
// transposed to y at the end. HasBias: the unfused conv adds the bias only where there is
// one (-0 + 0 would be +0).
template <bool HasBias>
void relu_pool_image(const float* out, int64_t O_pad, int64_t O, int64_t out_h, int64_t out_w,
                     const float* bias, float* y, uint8_t* route) {
  const int64_t ph = out_h / 2, pw = out_w / 2, PL = ph * pw;
  std::vector<float>& tile = Tiles::mine().pooled;
  std::vector<int32_t>& code = Tiles::mine().winner;
  tile.resize(static_cast<std::size_t>(PL * O));
  code.resize(static_cast<std::size_t>(O));
  for (int64_t i = 0; i < ph; ++i)
    for (int64_t j = 0; j < pw; ++j) {
      const float* a = out + (2 * i * out_w + 2 * j) * O_pad;  // the window's top-left
      const float* b = a + O_pad;
      const float* c = a + out_w * O_pad;
      const float* d = c + O_pad;
      float* best = tile.data() + (i * pw + j) * O;
      uint8_t* won = route + (i * pw + j) * O;
      for (int64_t o = 0; o < O; ++o) {
        const float va = relu(HasBias ? a[o] + bias[o] : a[o]),
                    vb = relu(HasBias ? b[o] + bias[o] : b[o]);
        const float vc = relu(HasBias ? c[o] + bias[o] : c[o]),
                    vd = relu(HasBias ? d[o] + bias[o] : d[o]);
        const float upper = std::max(va, vb), lower = std::max(vc, vd), m = std::max(upper, lower);
        best[o] = m;
        // arithmetic, not branches, and ints of the floats' width: the loop vectorises
        const int32_t b_wins = vb > va, d_wins = vd > vc, lower_wins = lower > upper,
                      stopped = !(m > 0.0f);
        const int32_t q = b_wins + lower_wins * (2 + d_wins - b_wins);
        code[static_cast<std::size_t>(o)] = q + stopped * (kStopped - q);
      }
      for (int64_t o = 0; o < O; ++o)
        won[o] = static_cast<uint8_t>(code[static_cast<std::size_t>(o)]);
    }
  conv_images::from_hwc(tile.data(), O, O, PL, nullptr, y);
}

// One image's output gradient into grad, [out_h + 2*ph, out_w + 2*pw, O_pad] padded by ph, pw:
// at each window's winner g, at its other three pixels +0 (as max_pool2d's backward and the
// ReLU's write: a stopped winner gets +0 too); pixels no window covers and channels past O are
// never written and stay zero (prepare_windows). g [O, PL] is first transposed to channels
// last, so the four pixels of a window are four contiguous runs of channels (vectorised).
// Where bias_sums is not null, adds the plane's sums: sum_of's over each channel, zeros and
// all, so the same to the bit, taken from grad for all channels at once, pixel by pixel.
void route_gradient(const float* g, const uint8_t* route, int64_t O, int64_t out_h, int64_t out_w,
                    PaddedImage& grad, int64_t ph, int64_t pw, int64_t O_pad, float* bias_sums) {
  grad.prepare_windows(out_h + 2 * ph, out_w + 2 * pw, O_pad);
  const int64_t pooled_h = out_h / 2, pooled_w = out_w / 2, PL = pooled_h * pooled_w;
  std::vector<float>& gt = Tiles::mine().pooled;
  gt.resize(static_cast<std::size_t>(PL * O));
  transpose_floats(g, PL, O, PL, gt.data(), O);  // [O, PL] -> [PL, O]
  auto pixel = [&](int64_t row, int64_t col) {   // grad's channels at a plane position
    return grad.data.data() + ((row + ph) * grad.cols + col + pw) * O_pad;
  };
  for (int64_t i = 0; i < pooled_h; ++i)
    for (int64_t j = 0; j < pooled_w; ++j) {
      const float* gv = gt.data() + (i * pooled_w + j) * O;
      const uint8_t* won = route + (i * pooled_w + j) * O;
      for (uint8_t q = 0; q < 4; ++q) {  // top-left, top-right, bottom-left, bottom-right
        float* to = pixel(2 * i + q / 2, 2 * j + q % 2);
        for (int64_t o = 0; o < O; ++o) to[o] = won[o] == q ? gv[o] : 0.0f;
      }
    }
  if (bias_sums == nullptr) return;
  const int64_t L = out_h * out_w;
  std::vector<float> part(static_cast<std::size_t>(16 * O), 0.0f);  // [16][O]
  for (int64_t row = 0, p = 0; row < out_h; ++row)
    for (int64_t col = 0; col < out_w; ++col, ++p) {
      const float* from = pixel(row, col);
      float* lane = part.data() + conv_images::lane_of(p, L) * O;
      for (int64_t o = 0; o < O; ++o) lane[o] += from[o];
    }
  for (int64_t o = 0; o < O; ++o) {
    float lanes[16];
    for (int k = 0; k < 16; ++k) lanes[k] = part[static_cast<std::size_t>(k * O + o)];
    bias_sums[o] += conv_images::add_lanes(lanes);
  }
}

}  // namespace

bool CpuBackend::fuses_conv_relu_pool() const { return fused_conv(); }

bool CpuBackend::conv2d_relu_pool_direct(const float* x, const float* weight, const float* bias,
                                         const Window2d& w, int64_t O, float* y, uint8_t* route) {
  if (!conv_relu_pool_fused_runs(w, O)) return false;  // cpu_dispatch.cpp decides
  const int64_t PL = (w.out_h / 2) * (w.out_w / 2);
  conv_images::forward_images(*this, x, weight, w, O,
                              [&](int64_t n, const float* out, int64_t O_pad) {
    if (bias != nullptr)
      relu_pool_image<true>(out, O_pad, O, w.out_h, w.out_w, bias, y + n * O * PL,
                            route + n * O * PL);
    else
      relu_pool_image<false>(out, O_pad, O, w.out_h, w.out_w, bias, y + n * O * PL,
                             route + n * O * PL);
  });
  return true;
}

bool CpuBackend::conv2d_relu_pool_direct_backward(const float* g, const uint8_t* route,
                                                  const float* x, const float* weight,
                                                  const Window2d& w, int64_t O, float* gx,
                                                  float* gw, float* gb) {
  if (!conv_relu_pool_fused_runs(w, O)) return false;
  const int64_t PL = (w.out_h / 2) * (w.out_w / 2);
  conv_images::backward_images(
      *this, x, weight, w, O, gx, gw, gb,
      [&](int64_t n, PaddedImage& grad, int64_t ph, int64_t pw, int64_t O_pad, float* sums) {
    route_gradient(g + n * O * PL, route + n * O * PL, O, w.out_h, w.out_w, grad, ph, pw, O_pad,
                   sums);
      });
  return true;
}

}  // namespace dplab
