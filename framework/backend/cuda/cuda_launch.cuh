// cuda_launch.cuh: what every .cu file of the backend shares: launch geometry for
// grid-stride loops and the device-side error flag. Included only by .cu files.
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

}  // namespace dplab::cuda
