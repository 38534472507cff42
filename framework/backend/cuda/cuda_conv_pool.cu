// cuda_conv_pool.cu: im2col / col2im (convolution = im2col + one GEMM) and 2-d pooling.
// x: [N, C, H, W]   cols: [C*kh*kw, N*out_h*out_w]   y: [N, C, out_h, out_w]
// Backward passes that scatter (col2im, avg_pool2d_backward) are written as gathers: one
// thread per input pixel sums every window entry that read it. No atomics, so the result
// is deterministic and gx is simply overwritten. A window entry (oy, ki) read input row
// iy = oy*stride - pad + ki, so pixel iy is reached from oy = (iy + pad - ki) / stride when
// that divides exactly and lands in [0, out_h). max_pool2d_backward routes each gradient
// to its argmax with atomicAdd instead (overlapping windows can share a winner).
// Read next: cuda_optim.cu.
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/backend/cuda/cuda_launch.cuh"

namespace dplab::cuda {
namespace {

__global__ void im2col_kernel(const float* x, KWindow w, float* cols, int64_t n) {
  const int64_t spatial = w.out_h * w.out_w, kk = w.kh * w.kw;
  DPLAB_GRID_LOOP(e, n) {  // e = (row * N + b) * spatial + p
    const int64_t p = e % spatial;
    const int64_t b = (e / spatial) % w.N;
    const int64_t row = e / (spatial * w.N);
    const int64_t c = row / kk, ki = (row % kk) / w.kw, kj = row % w.kw;
    const int64_t iy = (p / w.out_w) * w.stride - w.pad + ki;
    const int64_t ix = (p % w.out_w) * w.stride - w.pad + kj;
    const bool inside = iy >= 0 && iy < w.H && ix >= 0 && ix < w.W;
    cols[e] = inside ? x[((b * w.C + c) * w.H + iy) * w.W + ix] : 0.0f;
  }
}

// Calls f(oy, ox, ki, kj) for every window entry that read pixel (iy, ix).
template <typename F>
__device__ inline void for_each_reader(const KWindow& w, int64_t iy, int64_t ix, F f) {
  for (int64_t ki = 0; ki < w.kh; ++ki) {
    const int64_t ny = iy + w.pad - ki;
    if (ny < 0 || ny % w.stride != 0 || ny / w.stride >= w.out_h) continue;
    for (int64_t kj = 0; kj < w.kw; ++kj) {
      const int64_t nx = ix + w.pad - kj;
      if (nx < 0 || nx % w.stride != 0 || nx / w.stride >= w.out_w) continue;
      f(ny / w.stride, nx / w.stride, ki, kj);
    }
  }
}

__global__ void col2im_kernel(const float* cols, KWindow w, float* gx, int64_t n) {
  const int64_t spatial = w.out_h * w.out_w, kk = w.kh * w.kw;
  DPLAB_GRID_LOOP(e, n) {
    const int64_t ix = e % w.W, iy = (e / w.W) % w.H, bc = e / (w.H * w.W);
    const int64_t b = bc / w.C, c = bc % w.C;
    // channel c's kk rows start at row c*kk, each N*spatial long; image b's part at b*spatial
    const float* base = cols + c * kk * w.N * spatial + b * spatial;
    float acc = 0.0f;
    for_each_reader(w, iy, ix, [&](int64_t oy, int64_t ox, int64_t ki, int64_t kj) {
      acc += base[(ki * w.kw + kj) * w.N * spatial + oy * w.out_w + ox];
    });
    gx[e] = acc;
  }
}

__global__ void max_pool2d_kernel(const float* x, KWindow w, float* y, int64_t* argmax, int64_t n) {
  DPLAB_GRID_LOOP(e, n) {
    const int64_t ox = e % w.out_w, oy = (e / w.out_w) % w.out_h, bc = e / (w.out_h * w.out_w);
    const float* plane = x + bc * w.H * w.W;
    float best = 0.0f;
    int64_t best_at = -1;  // stays -1 when the window holds only padding
    for (int64_t ki = 0; ki < w.kh; ++ki) {
      const int64_t iy = oy * w.stride - w.pad + ki;
      if (iy < 0 || iy >= w.H) continue;
      for (int64_t kj = 0; kj < w.kw; ++kj) {
        const int64_t ix = ox * w.stride - w.pad + kj;
        if (ix < 0 || ix >= w.W) continue;
        const float v = plane[iy * w.W + ix];
        if (best_at < 0 || v > best) {  // strict: the first maximum in scan order wins
          best = v;
          best_at = iy * w.W + ix;
        }
      }
    }
    y[e] = best;
    argmax[e] = best_at;
  }
}

// An argmax outside its plane (a corrupt or foreign tensor) is flagged, not followed: the
// CPU backend throws for it, and here it would write into another image's gradient.
__global__ void max_pool2d_backward_kernel(const float* gy, const int64_t* argmax, KWindow w,
                                           float* gx, int64_t n, unsigned long long* err) {
  DPLAB_GRID_LOOP(e, n) {
    const int64_t at = argmax[e];
    if (at < 0) continue;  // a window of padding only
    if (at >= w.H * w.W) {
      report_bad_index(err, at);
      continue;
    }
    const int64_t bc = e / (w.out_h * w.out_w);
    atomicAdd(&gx[bc * w.H * w.W + at], gy[e]);
  }
}

// Divisor kh*kw even where the window hangs over the padding (count_include_pad=True).
__global__ void avg_pool2d_kernel(const float* x, KWindow w, float* y, int64_t n) {
  const float inv = 1.0f / static_cast<float>(w.kh * w.kw);
  DPLAB_GRID_LOOP(e, n) {
    const int64_t ox = e % w.out_w, oy = (e / w.out_w) % w.out_h, bc = e / (w.out_h * w.out_w);
    const float* plane = x + bc * w.H * w.W;
    float acc = 0.0f;
    for (int64_t ki = 0; ki < w.kh; ++ki) {
      const int64_t iy = oy * w.stride - w.pad + ki;
      if (iy < 0 || iy >= w.H) continue;
      for (int64_t kj = 0; kj < w.kw; ++kj) {
        const int64_t ix = ox * w.stride - w.pad + kj;
        if (ix >= 0 && ix < w.W) acc += plane[iy * w.W + ix];
      }
    }
    y[e] = acc * inv;
  }
}

// d avg / dx = 1/(kh*kw) for every window that covers x
__global__ void avg_pool2d_backward_kernel(const float* gy, KWindow w, float* gx, int64_t n) {
  const float inv = 1.0f / static_cast<float>(w.kh * w.kw);
  DPLAB_GRID_LOOP(e, n) {
    const int64_t ix = e % w.W, iy = (e / w.W) % w.H, bc = e / (w.H * w.W);
    const float* g = gy + bc * w.out_h * w.out_w;
    float acc = 0.0f;
    for_each_reader(w, iy, ix,
                    [&](int64_t oy, int64_t ox, int64_t, int64_t) { acc += g[oy * w.out_w + ox]; });
    gx[e] = acc * inv;
  }
}

}  // namespace

cudaError_t launch_im2col(const float* x, const KWindow& w, float* cols, cudaStream_t s) {
  const int64_t n = w.N * w.C * w.kh * w.kw * w.out_h * w.out_w;
  if (n > 0) im2col_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, w, cols, n);
  return cudaGetLastError();
}

cudaError_t launch_col2im(const float* cols, const KWindow& w, float* gx, cudaStream_t s) {
  const int64_t n = w.N * w.C * w.H * w.W;
  if (n > 0) col2im_kernel<<<blocks_for(n), kThreads, 0, s>>>(cols, w, gx, n);
  return cudaGetLastError();
}

cudaError_t launch_max_pool2d(const float* x, const KWindow& w, float* y, int64_t* argmax,
                              cudaStream_t s) {
  const int64_t n = w.N * w.C * w.out_h * w.out_w;
  if (n > 0) max_pool2d_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, w, y, argmax, n);
  return cudaGetLastError();
}

cudaError_t launch_max_pool2d_backward(const float* gy, const int64_t* argmax, const KWindow& w,
                                       float* gx, unsigned long long* bad, cudaStream_t s) {
  const int64_t n_in = w.N * w.C * w.H * w.W, n_out = w.N * w.C * w.out_h * w.out_w;
  if (n_in == 0) return cudaSuccess;
  // gx is overwritten: zero it, then route each gradient to the input that won its window
  cudaError_t err = cudaMemsetAsync(gx, 0, static_cast<size_t>(n_in) * sizeof(float), s);
  if (err != cudaSuccess) return err;
  if (n_out > 0) {
    max_pool2d_backward_kernel<<<blocks_for(n_out), kThreads, 0, s>>>(gy, argmax, w, gx, n_out,
                                                                      bad);
  }
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d(const float* x, const KWindow& w, float* y, cudaStream_t s) {
  const int64_t n = w.N * w.C * w.out_h * w.out_w;
  if (n > 0) avg_pool2d_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, w, y, n);
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d_backward(const float* gy, const KWindow& w, float* gx,
                                       cudaStream_t s) {
  const int64_t n = w.N * w.C * w.H * w.W;
  if (n > 0) avg_pool2d_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(gy, w, gx, n);
  return cudaGetLastError();
}

}  // namespace dplab::cuda
