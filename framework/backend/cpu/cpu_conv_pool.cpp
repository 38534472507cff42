// cpu_conv_pool.cpp: im2col / col2im (convolution as one GEMM) and max / avg pooling.
// im2col unrolls every kh x kw window of x: [N, C, H, W] into a column of
// cols: [C*kh*kw, N*out_h*out_w], row (c*kh + i)*kw + j, column n*out_h*out_w + oh*out_w + ow,
// holding x[n, c, oh*stride - pad + i, ow*stride - pad + j] (0 outside the image: zero
// padding). The images sit side by side, so conv = W[O, C*kh*kw] @ cols is one GEMM for the
// N images passed in (ops/nn_conv.cpp passes a group at a time), and col2im is its adjoint
// (scatter-add back), which is the input gradient. Pooling argmax is the flat index
// ih*W + iw in the (n, c) input plane. Loops over the N*C planes share them between threads.
// Cost: im2col writes C*kh*kw*out_h*out_w floats per image, kh*kw times the input.
// Read next: cpu_optim.cpp.
#include <algorithm>
#include <cstring>
#include <limits>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"

namespace dplab {
namespace {

void check_window(const char* what, const Window2d& w) {
  DPLAB_CHECK(w.N >= 0 && w.C >= 0 && w.H >= 0 && w.W >= 0 && w.kh > 0 && w.kw > 0 &&
                  w.stride > 0 && w.pad >= 0,
              "{}: bad window N={} C={} H={} W={} kernel={}x{} stride={} pad={}", what, w.N, w.C,
              w.H, w.W, w.kh, w.kw, w.stride, w.pad);
  const int64_t oh = (w.H + 2 * w.pad - w.kh) / w.stride + 1;
  const int64_t ow = (w.W + 2 * w.pad - w.kw) / w.stride + 1;
  DPLAB_CHECK(w.out_h == oh && w.out_w == ow,
              "{}: expected output {}x{} for input {}x{}, kernel {}x{}, stride {}, pad {}; got {}x{}",
              what, oh, ow, w.H, w.W, w.kh, w.kw, w.stride, w.pad, w.out_h, w.out_w);
}

// The output columns ow whose input column ow*stride - pad + j lies in [0, W): [lo, hi).
void valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t& lo,
                 int64_t& hi) {
  // need 0 <= o*stride + offset < size
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  hi = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
}

// Where image n = nc / C, channel c = nc % C starts in cols: row c*kh*kw, column n*L.
// Its kh*kw rows follow, each N*L floats apart.
float* first_row(float* cols, const Window2d& w, int64_t nc) {
  const int64_t n = nc / w.C, c = nc % w.C, L = w.out_h * w.out_w;
  return cols + c * w.kh * w.kw * w.N * L + n * L;
}

// Threads for a loop over the N*C planes (each writes only its own outputs): all of them
// when there is enough work to share, else one (a parallel region costs microseconds).
int plane_threads(const Window2d& w, int64_t work_per_plane) {
  return w.N * w.C * work_per_plane >= (int64_t{1} << 16) ? get_num_threads() : 1;
}

}  // namespace

void CpuBackend::im2col(const float* x, const Window2d& w, float* cols) {
  check_window("im2col", w);
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
#pragma omp parallel for num_threads(plane_threads(w, w.kh * w.kw * L)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* img = x + nc * plane;
    float* out = first_row(cols, w, nc);
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j) {
        float* row = out + (i * w.kw + j) * w.N * L;
        int64_t lo, hi;
        valid_range(j - w.pad, w.stride, w.W, w.out_w, lo, hi);
        for (int64_t oh = 0; oh < w.out_h; ++oh) {
          float* dst = row + oh * w.out_w;
          const int64_t ih = oh * w.stride - w.pad + i;
          if (ih < 0 || ih >= w.H) {
            std::fill_n(dst, w.out_w, 0.0f);
            continue;
          }
          // input column of output o is o*stride + off, inside [0, W) for o in [lo, hi)
          const float* src = img + ih * w.W;
          const int64_t off = j - w.pad;
          std::fill_n(dst, lo, 0.0f);
          if (w.stride == 1) {
            std::copy(src + lo + off, src + hi + off, dst + lo);
          } else {
            for (int64_t o = lo; o < hi; ++o) dst[o] = src[o * w.stride + off];
          }
          std::fill(dst + hi, dst + w.out_w, 0.0f);
        }
      }
    }
  }
}

void CpuBackend::col2im(const float* cols, const Window2d& w, float* gx) {
  check_window("col2im", w);
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
  std::fill_n(gx, w.N * w.C * plane, 0.0f);
#pragma omp parallel for num_threads(plane_threads(w, w.kh * w.kw * L)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    float* img = gx + nc * plane;
    const float* in = first_row(const_cast<float*>(cols), w, nc);
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j) {
        const float* row = in + (i * w.kw + j) * w.N * L;
        int64_t lo, hi;
        valid_range(j - w.pad, w.stride, w.W, w.out_w, lo, hi);
        for (int64_t oh = 0; oh < w.out_h; ++oh) {
          const int64_t ih = oh * w.stride - w.pad + i;
          if (ih < 0 || ih >= w.H) continue;  // padding: its gradient goes nowhere
          const float* src = row + oh * w.out_w;
          float* dst = img + ih * w.W;
          const int64_t off = j - w.pad;
          if (w.stride == 1) {  // the common case, kept apart so it vectorises
            for (int64_t o = lo; o < hi; ++o) dst[o + off] += src[o];
          } else {
            for (int64_t o = lo; o < hi; ++o) dst[o * w.stride + off] += src[o];
          }
        }
      }
    }
  }
}

// Without padding every window lies inside the image: no bounds to compute per output.
// Same rule as below: the first maximum in row-major order wins.
static void max_pool2d_unpadded(const float* x, const Window2d& w, float* y, int64_t* argmax) {
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
#pragma omp parallel for num_threads(plane_threads(w, L * w.kh * w.kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* img = x + nc * plane;
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        const int64_t corner = oh * w.stride * w.W + ow * w.stride;
        float best = img[corner];
        int64_t best_i = corner;
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j) {
            const float v = img[corner + i * w.W + j];
            if (v > best) best = v, best_i = corner + i * w.W + j;
          }
        y[nc * L + oh * w.out_w + ow] = best;
        argmax[nc * L + oh * w.out_w + ow] = best_i;
      }
    }
  }
}

void CpuBackend::max_pool2d(const float* x, const Window2d& w, float* y, int64_t* argmax) {
  check_window("max_pool2d", w);
  if (w.pad == 0) return max_pool2d_unpadded(x, w, y, argmax);
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
#pragma omp parallel for num_threads(plane_threads(w, L * w.kh * w.kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* img = x + nc * plane;
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      const int64_t h0 = std::max<int64_t>(oh * w.stride - w.pad, 0);
      const int64_t h1 = std::min(oh * w.stride - w.pad + w.kh, w.H);
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        const int64_t w0 = std::max<int64_t>(ow * w.stride - w.pad, 0);
        const int64_t w1 = std::min(ow * w.stride - w.pad + w.kw, w.W);
        // Only in-image positions are visited, so padding (an implicit -inf) never wins;
        // strict > keeps the first maximum in row-major order.
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_i = -1;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) {
            const float v = img[ih * w.W + iw];
            if (best_i < 0 || v > best) {
              best = v;
              best_i = ih * w.W + iw;
            }
          }
        }
        y[nc * L + oh * w.out_w + ow] = best_i < 0 ? 0.0f : best;
        argmax[nc * L + oh * w.out_w + ow] = best_i;
      }
    }
  }
}

void CpuBackend::max_pool2d_backward(const float* gy, const int64_t* argmax, const Window2d& w,
                                     float* gx) {
  check_window("max_pool2d_backward", w);
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
  std::fill_n(gx, w.N * w.C * plane, 0.0f);
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    for (int64_t k = 0; k < L; ++k) {
      const int64_t a = argmax[nc * L + k];
      if (a < 0) continue;  // a window of padding only
      DPLAB_CHECK(a < plane, "max_pool2d_backward: argmax {} out of range [0, {}) at output {}", a,
                  plane, nc * L + k);
      gx[nc * plane + a] += gy[nc * L + k];  // overlapping windows may pick the same input
    }
  }
}

// y = (sum of the kh x kw window, padding read as 0) / (kh*kw)   (count_include_pad=True)
void CpuBackend::avg_pool2d(const float* x, const Window2d& w, float* y) {
  check_window("avg_pool2d", w);
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
  const float scale = 1.0f / static_cast<float>(w.kh * w.kw);
#pragma omp parallel for num_threads(plane_threads(w, L * w.kh * w.kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* img = x + nc * plane;
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      const int64_t h0 = std::max<int64_t>(oh * w.stride - w.pad, 0);
      const int64_t h1 = std::min(oh * w.stride - w.pad + w.kh, w.H);
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        const int64_t w0 = std::max<int64_t>(ow * w.stride - w.pad, 0);
        const int64_t w1 = std::min(ow * w.stride - w.pad + w.kw, w.W);
        float s = 0.0f;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) s += img[ih * w.W + iw];
        }
        y[nc * L + oh * w.out_w + ow] = s * scale;
      }
    }
  }
}

// d y[o] / d x[i] = 1/(kh*kw) for every in-image i of window o.
void CpuBackend::avg_pool2d_backward(const float* gy, const Window2d& w, float* gx) {
  check_window("avg_pool2d_backward", w);
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
  const float scale = 1.0f / static_cast<float>(w.kh * w.kw);
  std::fill_n(gx, w.N * w.C * plane, 0.0f);
#pragma omp parallel for num_threads(plane_threads(w, L * w.kh * w.kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    float* img = gx + nc * plane;
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      const int64_t h0 = std::max<int64_t>(oh * w.stride - w.pad, 0);
      const int64_t h1 = std::min(oh * w.stride - w.pad + w.kh, w.H);
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        const int64_t w0 = std::max<int64_t>(ow * w.stride - w.pad, 0);
        const int64_t w1 = std::min(ow * w.stride - w.pad + w.kw, w.W);
        const float g = gy[nc * L + oh * w.out_w + ow] * scale;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) img[ih * w.W + iw] += g;
        }
      }
    }
  }
}

}  // namespace dplab
