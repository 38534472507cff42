// cuda_transformer.cu: the transformer's row kernels, causal softmax and layer norm, forward
// and backward (backend.h states their maths; cpu_transformer.cpp is the reference they are
// tested against, tests/ops_cuda/cases_transformer.cpp).
// Rows: one block of kThreads per row, as softmax in cuda_nn.cu: each pass over the row is
// coalesced, and block_reduce (cuda_launch.cuh) gives every thread the row's max or sum.
// Layer norm's weight and bias gradients sum over rows instead: one thread per column,
// walking down the rows, so that neighbouring threads read neighbouring floats. Simple, not
// the fastest (a GPT's C = 768 columns keep only 768 threads busy).
// Read next: cuda_conv_pool.cu.
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/backend/cuda/cuda_launch.cuh"

namespace dplab::cuda {
namespace {

// x, y: [batch, q, k]. Row r is query i = r % q of its matrix and sees keys j < i + (k - q) + 1.
__global__ void causal_softmax_kernel(const float* x, float* y, int64_t batch, int64_t q,
                                      int64_t k) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t row = blockIdx.x; row < batch * q; row += gridDim.x) {
    const float* xr = x + row * k;
    float* yr = y + row * k;
    const int64_t seen = row % q + (k - q) + 1;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < seen; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_reduce(m, true, scratch);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < seen; j += blockDim.x) s += expf(xr[j] - m);
    s = block_reduce(s, false, scratch);
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
      yr[j] = j < seen ? expf(xr[j] - m) * inv : 0.0f;
  }
}

// mean and variance in two passes (the centred squares), as on the CPU: E[x^2] - E[x]^2
// cancels in float32 when |mean| >> std.
__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, float* y,
                                  float* mean, float* rstd, int64_t rows, int64_t cols, float eps) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    const float mu = block_reduce(s, false, scratch) / static_cast<float>(cols);
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) ss += (xr[j] - mu) * (xr[j] - mu);
    const float var = block_reduce(ss, false, scratch) / static_cast<float>(cols);
    const float r = 1.0f / sqrtf(var + eps);
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = r;
    }
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = (xr[j] - mu) * r;
      yr[j] = v * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
    }
  }
}

// gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = gy * w, per row.
__global__ void layer_norm_backward_x_kernel(const float* gy, const float* x, const float* w,
                                             const float* mean, const float* rstd, float* gx,
                                             int64_t rows, int64_t cols) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* gr = gy + row * cols;
    const float* xr = x + row * cols;
    const float mu = mean[row], r = rstd[row];
    float s_gh = 0.0f, s_ghx = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float gh = gr[j] * (w ? w[j] : 1.0f);
      s_gh += gh;
      s_ghx += gh * (xr[j] - mu) * r;
    }
    const float mean_gh = block_reduce(s_gh, false, scratch) / static_cast<float>(cols);
    const float mean_ghx = block_reduce(s_ghx, false, scratch) / static_cast<float>(cols);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float gh = gr[j] * (w ? w[j] : 1.0f);
      gx[row * cols + j] = r * (gh - mean_gh - (xr[j] - mu) * r * mean_ghx);
    }
  }
}

// gw[j] = sum_rows gy * xhat, gb[j] = sum_rows gy: one thread per column j.
__global__ void layer_norm_backward_wb_kernel(const float* gy, const float* x, const float* mean,
                                              const float* rstd, float* gw, float* gb, int64_t rows,
                                              int64_t cols) {
  DPLAB_GRID_LOOP(j, cols) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t row = 0; row < rows; ++row) {
      const float g = gy[row * cols + j];
      sw += g * (x[row * cols + j] - mean[row]) * rstd[row];
      sb += g;
    }
    if (gw) gw[j] = sw;
    if (gb) gb[j] = sb;
  }
}

}  // namespace

cudaError_t launch_causal_softmax(const float* x, float* y, int64_t batch, int64_t q, int64_t k,
                                  cudaStream_t s) {
  if (batch * q == 0 || k == 0) return cudaSuccess;
  causal_softmax_kernel<<<row_blocks(batch * q), kThreads, 0, s>>>(x, y, batch, q, k);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm(const float* x, const float* w, const float* b, float* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  layer_norm_kernel<<<row_blocks(rows), kThreads, 0, s>>>(x, w, b, y, mean, rstd, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_backward(const float* gy, const float* x, const float* w,
                                       const float* mean, const float* rstd, float* gx, float* gw,
                                       float* gb, int64_t rows, int64_t cols, cudaStream_t s) {
  if (cols == 0) return cudaSuccess;
  if (rows > 0 && gx) {
    layer_norm_backward_x_kernel<<<row_blocks(rows), kThreads, 0, s>>>(gy, x, w, mean, rstd, gx,
                                                                       rows, cols);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (gw || gb) {  // rows == 0 still writes zeros: an empty sum
    layer_norm_backward_wb_kernel<<<blocks_for(cols), kThreads, 0, s>>>(gy, x, mean, rstd, gw, gb,
                                                                        rows, cols);
  }
  return cudaGetLastError();
}

}  // namespace dplab::cuda
