// cuda_nn.cu: softmax / log_softmax (and their backwards), nll_loss, and indexing along
// dim 0 (index_rows, index_add_rows, gather_rows, scatter_add_rows).
// Softmax: one block of 256 threads per row; the row is read three times (max, sum of
// exp(x - max), write), each pass coalesced, with block reductions in shared memory.
// Subtracting the row max first keeps exp() <= 1, so rows of large logits do not overflow.
// Index kernels check every index (kernels cannot throw): a bad one is counted in err and
// its slot gets 0 (or is skipped); the host reads err after the launch and throws.
// The *_add_rows kernels use atomicAdd: repeated indices add from many threads at once.
// Read next: cuda_conv_pool.cu.
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/backend/cuda/cuda_launch.cuh"

namespace dplab::cuda {
namespace {

// y = exp(x - max) / sum(exp(x - max));  log: y = x - max - log(sum(exp(x - max)))
__global__ void softmax_kernel(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_reduce(m, true, scratch);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] - m);
    s = block_reduce(s, false, scratch);
    if (log) {
      const float lse = m + logf(s);
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] - lse;
    } else {
      const float inv = 1.0f / s;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
    }
  }
}

// softmax: gx = y * (gy - sum(gy * y));  log_softmax: gx = gy - exp(y) * sum(gy)
__global__ void softmax_backward_kernel(const float* gy, const float* y, float* gx, int64_t rows,
                                        int64_t cols, bool log) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* gr = gy + row * cols;
    const float* yr = y + row * cols;
    float* out = gx + row * cols;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += log ? gr[j] : gr[j] * yr[j];
    s = block_reduce(s, false, scratch);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      out[j] = log ? gr[j] - expf(yr[j]) * s : yr[j] * (gr[j] - s);
    }
  }
}

__global__ void nll_loss_kernel(const float* logp, const int64_t* target, float* out, int64_t rows,
                                int64_t cols, unsigned long long* err) {
  DPLAB_GRID_LOOP(i, rows) {
    const int64_t t = target[i];
    if (t < 0 || t >= cols) {
      report_bad_index(err, t);
      out[i] = 0.0f;
    } else {
      out[i] = -logp[i * cols + t];
    }
  }
}

// One thread per element of glogp [rows, cols]: the whole gradient is written, zeros included.
__global__ void nll_loss_backward_kernel(const float* gout, const int64_t* target, float* glogp,
                                         int64_t rows, int64_t cols, unsigned long long* err) {
  DPLAB_GRID_LOOP(e, rows * cols) {
    const int64_t i = e / cols, j = e - i * cols;
    const int64_t t = target[i];
    if (j == 0 && (t < 0 || t >= cols)) report_bad_index(err, t);
    glogp[e] = j == t ? -gout[i] : 0.0f;
  }
}

template <typename T>
__global__ void index_rows_kernel(const T* src, int64_t src_rows, const int64_t* idx, int64_t n_idx,
                                  int64_t row_elems, T* out, unsigned long long* err) {
  DPLAB_GRID_LOOP(e, n_idx * row_elems) {
    const int64_t i = e / row_elems, j = e - i * row_elems;
    const int64_t r = idx[i];
    if (r < 0 || r >= src_rows) {
      if (j == 0) report_bad_index(err, r);
      out[e] = T(0);
    } else {
      out[e] = src[r * row_elems + j];
    }
  }
}

// out has an unknown number of rows, so only r >= 0 can be checked here (as on the CPU).
__global__ void index_add_rows_kernel(const float* g, const int64_t* idx, int64_t n_idx,
                                      int64_t row_elems, float* out, unsigned long long* err) {
  DPLAB_GRID_LOOP(e, n_idx * row_elems) {
    const int64_t i = e / row_elems, j = e - i * row_elems;
    const int64_t r = idx[i];
    if (r < 0) {
      if (j == 0) report_bad_index(err, r);
    } else {
      atomicAdd(&out[r * row_elems + j], g[e]);
    }
  }
}

__global__ void gather_rows_kernel(const float* src, int64_t src_rows, const int64_t* idx,
                                   int64_t rows, int64_t cols, float* out,
                                   unsigned long long* err) {
  DPLAB_GRID_LOOP(e, rows * cols) {
    const int64_t j = e % cols;
    const int64_t r = idx[e];
    if (r < 0 || r >= src_rows) {
      report_bad_index(err, r);
      out[e] = 0.0f;
    } else {
      out[e] = src[r * cols + j];
    }
  }
}

__global__ void scatter_add_rows_kernel(const float* g, const int64_t* idx, int64_t rows,
                                        int64_t cols, float* out, unsigned long long* err) {
  DPLAB_GRID_LOOP(e, rows * cols) {
    const int64_t j = e % cols;
    const int64_t r = idx[e];
    if (r < 0) {
      report_bad_index(err, r);
    } else {
      atomicAdd(&out[r * cols + j], g[e]);
    }
  }
}

}  // namespace

cudaError_t launch_softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log,
                           cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  softmax_kernel<<<row_blocks(rows), kThreads, 0, s>>>(x, y, rows, cols, log);
  return cudaGetLastError();
}

cudaError_t launch_softmax_backward(const float* gy, const float* y, float* gx, int64_t rows,
                                    int64_t cols, bool log, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  softmax_backward_kernel<<<row_blocks(rows), kThreads, 0, s>>>(gy, y, gx, rows, cols, log);
  return cudaGetLastError();
}

cudaError_t launch_nll_loss(const float* logp, const int64_t* target, float* out, int64_t rows,
                            int64_t cols, unsigned long long* err, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  nll_loss_kernel<<<blocks_for(rows), kThreads, 0, s>>>(logp, target, out, rows, cols, err);
  return cudaGetLastError();
}

cudaError_t launch_nll_loss_backward(const float* gout, const int64_t* target, float* glogp,
                                     int64_t rows, int64_t cols, unsigned long long* err,
                                     cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  nll_loss_backward_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(gout, target, glogp, rows,
                                                                        cols, err);
  return cudaGetLastError();
}

cudaError_t launch_index_rows(int elem_bytes, const void* src, int64_t src_rows, const int64_t* idx,
                              int64_t n_idx, int64_t row_elems, void* out, unsigned long long* err,
                              cudaStream_t s) {
  const int64_t n = n_idx * row_elems;
  if (n == 0) return cudaSuccess;
  // Rows are moved as opaque words of the element size: float32 (4), int64 (8), float16 (2).
  if (elem_bytes == 4) {
    index_rows_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(src),
                                                                src_rows, idx, n_idx, row_elems,
                                                                static_cast<float*>(out), err);
  } else if (elem_bytes == 8) {
    index_rows_kernel<int64_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const int64_t*>(src),
                                                                  src_rows, idx, n_idx, row_elems,
                                                                  static_cast<int64_t*>(out), err);
  } else if (elem_bytes == 2) {
    index_rows_kernel<uint16_t>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(src), src_rows, idx, n_idx,
                                            row_elems, static_cast<uint16_t*>(out), err);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_index_add_rows(const float* g, const int64_t* idx, int64_t n_idx,
                                  int64_t row_elems, float* out, unsigned long long* err,
                                  cudaStream_t s) {
  const int64_t n = n_idx * row_elems;
  if (n == 0) return cudaSuccess;
  index_add_rows_kernel<<<blocks_for(n), kThreads, 0, s>>>(g, idx, n_idx, row_elems, out, err);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const float* src, int64_t src_rows, const int64_t* idx, int64_t rows,
                               int64_t cols, float* out, unsigned long long* err, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  gather_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(src, src_rows, idx, rows, cols,
                                                                  out, err);
  return cudaGetLastError();
}

cudaError_t launch_scatter_add_rows(const float* g, const int64_t* idx, int64_t rows, int64_t cols,
                                    float* out, unsigned long long* err, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  scatter_add_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(g, idx, rows, cols, out,
                                                                       err);
  return cudaGetLastError();
}

}  // namespace dplab::cuda
