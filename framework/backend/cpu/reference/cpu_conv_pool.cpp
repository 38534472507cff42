// cpu_conv_pool.cpp: im2col / col2im (convolution as one GEMM) and max / avg pooling.
// im2col unrolls every kh x kw window of x: [N, C, H, W] into a column of
// cols: [C*kh*kw, N*out_h*out_w], row (c*kh + i)*kw + j, column n*out_h*out_w + oh*out_w + ow,
// holding x[n, c, oh*stride - pad + i, ow*stride - pad + j] (0 outside the image: zero
// padding). The images sit side by side, so conv = W[O, C*kh*kw] @ cols is one GEMM for the
// N images passed in (ops/conv2d_im2col.cpp passes a group at a time), and col2im is its adjoint
// (scatter-add back), which is the input gradient. Pooling argmax is the flat index
// ih*W + iw in the (n, c) input plane. Loops over the N*C planes share them between threads.
// Cost: im2col writes C*kh*kw*out_h*out_w floats per image, kh*kw times the input.
// Read next: cpu_optim.cpp.
#include <algorithm>
#include <limits>
#include <vector>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/backend/cpu/cpu_vector.h"
#include "framework/error.h"

namespace dplab {
namespace {

// Where image n = nc / C, channel c = nc % C starts in cols: row c*kh*kw, column n*L.
// Its kh*kw rows follow, each N*L floats apart.
float* first_row(float* cols, const Window2d& w, int64_t nc) {
  const int64_t n = nc / w.C, c = nc % w.C, L = w.out_h * w.out_w;
  return cols + c * w.kh * w.kw * w.N * L + n * L;
}

// Threads for a loop over the N*C planes, each writing only its own outputs.
int plane_threads(const Window2d& w, int64_t work_per_plane) {
  return threads_for(w.N * w.C * work_per_plane);
}

// dst[0, n) = src[0, n) for a short row of im2col (an image row: 14 or 28 floats in the
// LeNet), in 8-float vectors (cpu_vector.h): whole vectors, the last one overlapping the
// one before, instead of a vector loop with a scalar tail, whose bookkeeping cost more than the
// copying. (col2im's += cannot overlap, and its plain loop measured fastest.)
inline void copy_row(const float* src, float* dst, int64_t n) {
  if (n < 8) {
    for (int64_t o = 0; o < n; ++o) dst[o] = src[o];
    return;
  }
  for (int64_t o = 0; o + 8 < n; o += 8) store8(dst + o, load8(src + o));
  store8(dst + n - 8, load8(src + n - 8));
}

// The in-image part of output (oh, ow)'s window: rows [h0, h1), columns [w0, w1). Padding
// lies outside it (a max reads it as -inf, an average as 0), so it is never visited.
struct WindowSpan {
  int64_t h0, h1, w0, w1;
};
// visit(k, span) for every output k = oh * out_w + ow of one plane, in row-major order: the
// window loop of the padded max-pool, the average pool and its backward.
template <typename Visit>
inline void each_window(const Window2d& w, Visit visit) {
  for (int64_t oh = 0; oh < w.out_h; ++oh) {
    const int64_t h0 = std::max<int64_t>(oh * w.stride - w.pad, 0);
    const int64_t h1 = std::min(oh * w.stride - w.pad + w.kh, w.H);
    for (int64_t ow = 0; ow < w.out_w; ++ow) {
      const int64_t w0 = std::max<int64_t>(ow * w.stride - w.pad, 0);
      const int64_t w1 = std::min(ow * w.stride - w.pad + w.kw, w.W);
      visit(oh * w.out_w + ow, WindowSpan{h0, h1, w0, w1});
    }
  }
}

// One input plane with a border of `pad` zeros: [H + 2*pad, W + 2*pad]. Windows read from it
// need no bounds checks, so im2col's and col2im's inner loops are plain vectorisable copies.
// Each thread keeps its own (a plane is small: 18x18 floats for the LeNet's second conv).
struct PaddedPlane {
  int64_t rows, cols, pad;
  std::vector<float>& buf;
  explicit PaddedPlane(const Window2d& w)
      : rows(w.H + 2 * w.pad), cols(w.W + 2 * w.pad), pad(w.pad), buf(scratch()) {
    buf.assign(static_cast<std::size_t>(rows * cols), 0.0f);
  }
  static std::vector<float>& scratch() {
    thread_local std::vector<float> b;
    return b;
  }
  // the padded position of output (0, 0) under kernel tap (i, j); output row oh + 1 is
  // stride * cols floats further on
  float* window(int64_t i, int64_t j) { return buf.data() + i * cols + j; }
  void load(const float* img, int64_t H, int64_t W) {  // the border stays 0
    for (int64_t h = 0; h < H; ++h) copy_row(img + h * W, buf.data() + (h + pad) * cols + pad, W);
  }
  void store(float* img, int64_t H, int64_t W) const {  // the interior only
    for (int64_t h = 0; h < H; ++h) copy_row(buf.data() + (h + pad) * cols + pad, img + h * W, W);
  }
};

}  // namespace

void CpuBackend::im2col_kernel(const float* x, const Window2d& w, float* cols) {
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w, NL = w.N * L;
  const int64_t oh_n = w.out_h, ow_n = w.out_w, s = w.stride;
#pragma omp parallel for num_threads(plane_threads(w, w.kh* w.kw* L)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    PaddedPlane padded(w);
    padded.load(x + nc * plane, w.H, w.W);
    const int64_t src_step = s * padded.cols;  // one output row down
    float* out = first_row(cols, w, nc);
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j) {
        const float* src = padded.window(i, j);
        float* dst = out + (i * w.kw + j) * NL;
        for (int64_t oh = 0; oh < oh_n; ++oh, src += src_step, dst += ow_n) {
          if (s == 1) {
            copy_row(src, dst, ow_n);
          } else {
            for (int64_t o = 0; o < ow_n; ++o) dst[o] = src[o * s];
          }
        }
      }
    }
  }
}

// The adjoint of im2col: every column entry is added back where im2col read it, into the
// padded plane; what lands on the border (padding) is dropped when the interior is stored.
void CpuBackend::col2im_kernel(const float* cols, const Window2d& w, float* gx) {
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w, NL = w.N * L;
  const int64_t oh_n = w.out_h, ow_n = w.out_w, s = w.stride;
#pragma omp parallel for num_threads(plane_threads(w, w.kh* w.kw* L)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    PaddedPlane padded(w);
    const int64_t dst_step = s * padded.cols;  // one output row down
    const float* in = first_row(const_cast<float*>(cols), w, nc);
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j) {
        const float* src = in + (i * w.kw + j) * NL;
        float* dst = padded.window(i, j);
        for (int64_t oh = 0; oh < oh_n; ++oh, src += ow_n, dst += dst_step) {
          if (s == 1) {
            for (int64_t o = 0; o < ow_n; ++o) dst[o] += src[o];
          } else {
            for (int64_t o = 0; o < ow_n; ++o) dst[o * s] += src[o];
          }
        }
      }
    }
    padded.store(gx + nc * plane, w.H, w.W);
  }
}

// 1 MiB of columns (a Zen core's L2), which im2col writes and the GEMM reads back while they
// are still in cache. On several threads conv2d runs one group per thread (lanes,
// cpu_threads.cpp), so each thread's group is this size too: on two threads, larger groups
// were slower. The backward unrolls the columns again instead of keeping the forward's: kept,
// they leave the cache in between, and reading them back was slower than unrolling.
int64_t CpuBackend::im2col_group_floats() const { return int64_t{1} << 18; }

// The 2x2 window with stride 2 (LeNet's, VGG's): each output is a tournament, top pair
// against bottom pair. Ties go to the earlier element at each match, so the winner is the
// first maximum in row-major order, as in the general loop. Written without branches, so
// that the compiler vectorises the row (pairs loaded with shuffles). Written with ?: instead
// of std::max, GCC 12 made it branches.
static void max_pool2x2(const float* x, const Window2d& w, float* y, int64_t* argmax) {
  // (locals, not w's fields: argmax stores are int64_t and could alias them, as far as the
  // compiler knows, which stops it from vectorising)
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w, W = w.W, out_w = w.out_w;
  const int32_t W32 = static_cast<int32_t>(W);
#pragma omp parallel for num_threads(plane_threads(w, L * 4)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      const int64_t row = 2 * oh * W;  // the window's top-left corner is row + 2*ow
      const float* top = x + nc * plane + row;
      const float* bottom = top + W;
      float* y_row = y + nc * L + oh * out_w;
      int64_t* a_row = argmax + nc * L + oh * out_w;
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const float a = top[2 * ow], b = top[2 * ow + 1];
        const float c = bottom[2 * ow], d = bottom[2 * ow + 1];
        // (std::max(p, q) is q only if q > p: ties keep the earlier element)
        const float upper = std::max(a, b), lower = std::max(c, d);
        y_row[ow] = std::max(upper, lower);
        const int32_t b_wins = b > a, d_wins = d > c, lower_wins = lower > upper;
        a_row[ow] = row + 2 * ow + b_wins + lower_wins * (W32 + d_wins - b_wins);
      }
    }
  }
}

// Without padding every window lies inside the image: no bounds to compute per output.
// Same rule as below: the first maximum in row-major order wins.
static void max_pool2d_unpadded(const float* x, const Window2d& w, float* y, int64_t* argmax) {
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w, kh = w.kh, kw = w.kw;
#pragma omp parallel for num_threads(plane_threads(w, L* kh* kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* img = x + nc * plane;
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        const int64_t corner = oh * w.stride * w.W + ow * w.stride;
        float best = img[corner];
        int64_t best_i = corner;
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {  // selects, not branches: random data mispredicts
            const float v = img[corner + i * w.W + j];
            const bool wins = v > best;
            best = wins ? v : best;
            best_i = wins ? corner + i * w.W + j : best_i;
          }
        y[nc * L + oh * w.out_w + ow] = best;
        argmax[nc * L + oh * w.out_w + ow] = best_i;
      }
    }
  }
}

void CpuBackend::max_pool2d_kernel(const float* x, const Window2d& w, float* y, int64_t* argmax) {
  if (w.pad == 0 && w.kh == 2 && w.kw == 2 && w.stride == 2) return max_pool2x2(x, w, y, argmax);
  if (w.pad == 0) return max_pool2d_unpadded(x, w, y, argmax);
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
#pragma omp parallel for num_threads(plane_threads(w, L* w.kh* w.kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* img = x + nc * plane;
    each_window(w, [&](int64_t k, const WindowSpan& s) {
      // Only in-image positions are visited, so padding (an implicit -inf) never wins;
      // strict > keeps the first maximum in row-major order.
      float best = -std::numeric_limits<float>::infinity();
      int64_t best_i = -1;
      for (int64_t ih = s.h0; ih < s.h1; ++ih) {
        for (int64_t iw = s.w0; iw < s.w1; ++iw) {
          const float v = img[ih * w.W + iw];
          if (best_i < 0 || v > best) {
            best = v;
            best_i = ih * w.W + iw;
          }
        }
      }
      y[nc * L + k] = best_i < 0 ? 0.0f : best;
      argmax[nc * L + k] = best_i;
    });
  }
}

void CpuBackend::max_pool2d_backward_kernel(const float* gy, const int64_t* argmax,
                                            const Window2d& w, float* gx) {
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
  int64_t bad = -1;  // an output whose argmax is outside its plane (reported after the loop)
#pragma omp parallel for num_threads(plane_threads(w, plane)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    float* img = gx + nc * plane;
    std::fill_n(img, plane, 0.0f);
    for (int64_t k = 0; k < L; ++k) {
      const int64_t a = argmax[nc * L + k];
      if (a < 0) continue;  // a window of padding only
      if (a >= plane) {
#pragma omp critical(max_pool2d_backward_bad)
        bad = nc * L + k;
        continue;
      }
      img[a] += gy[nc * L + k];  // overlapping windows may pick the same input
    }
  }
  DPLAB_CHECK(bad < 0, "max_pool2d_backward: argmax {} out of range [0, {}) at output {}",
              bad < 0 ? 0 : argmax[bad], plane, bad);
}

// y = (sum of the kh x kw window, padding read as 0) / (kh*kw)   (count_include_pad=True)
void CpuBackend::avg_pool2d_kernel(const float* x, const Window2d& w, float* y) {
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
  const float scale = 1.0f / static_cast<float>(w.kh * w.kw);
#pragma omp parallel for num_threads(plane_threads(w, L* w.kh* w.kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* img = x + nc * plane;
    each_window(w, [&](int64_t k, const WindowSpan& s) {
      float sum = 0.0f;
      for (int64_t ih = s.h0; ih < s.h1; ++ih) {
        for (int64_t iw = s.w0; iw < s.w1; ++iw) sum += img[ih * w.W + iw];
      }
      y[nc * L + k] = sum * scale;
    });
  }
}

// d y[o] / d x[i] = 1/(kh*kw) for every in-image i of window o.
void CpuBackend::avg_pool2d_backward_kernel(const float* gy, const Window2d& w, float* gx) {
  const int64_t plane = w.H * w.W, L = w.out_h * w.out_w;
  const float scale = 1.0f / static_cast<float>(w.kh * w.kw);
  std::fill_n(gx, w.N * w.C * plane, 0.0f);
#pragma omp parallel for num_threads(plane_threads(w, L* w.kh* w.kw)) schedule(static)
  for (int64_t nc = 0; nc < w.N * w.C; ++nc) {
    float* img = gx + nc * plane;
    each_window(w, [&](int64_t k, const WindowSpan& s) {
      const float g = gy[nc * L + k] * scale;
      for (int64_t ih = s.h0; ih < s.h1; ++ih) {
        for (int64_t iw = s.w0; iw < s.w1; ++iw) img[ih * w.W + iw] += g;
      }
    });
  }
}

}  // namespace dplab
