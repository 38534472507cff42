// cuda_launch.cuh: what every .cu file of the backend shares: launch geometry for
// grid-stride loops and row kernels, the device-side error flag, and a block's sum or max.
// Included only by .cu files.
// Read next: cuda_elementwise.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace dplab::cuda {

constexpr int kThreads = 256;
// Enough blocks to fill an H100 (132 SMs x 2048 threads = 1056 blocks of 256) several
// times over; beyond that a grid-stride loop covers the rest with no launch cost.
constexpr int64_t kMaxBlocks = 8192;

inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

// for (i = this thread; i < n; i += all threads) — the grid-stride loop.
#define DPLAB_GRID_LOOP(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Records a bad index: err[0] counts them, the first one lands in err[1].
__device__ inline void report_bad_index(unsigned long long* err, int64_t value) {
  if (atomicAdd(&err[0], 1ULL) == 0ULL) err[1] = static_cast<unsigned long long>(value);
}

// The row kernels (softmax in cuda_nn.cu, layer norm in cuda_transformer.cu) run a block of
// kThreads per row, one row after another: this many blocks.
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

// Sum (max when is_max) of v over a block of kThreads threads; every thread gets the result.
// scratch holds one value per warp (kThreads / 32 = 8).
__device__ inline float block_reduce(float v, bool is_max, float* scratch) {
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_down_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
    for (int off = 16; off > 0; off /= 2) {
      const float o = __shfl_down_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace dplab::cuda
