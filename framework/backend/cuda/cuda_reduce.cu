// cuda_reduce.cu: sum / max / min / argmax of x viewed as [outer, r, inner] over r.
// Two shapes of work, picked by inner:
//  - inner > 1 (reducing a dim that is not the last): one thread per output (o, i) walks
//    k = 0..r-1; neighbouring threads read neighbouring i, so every load is coalesced.
//  - inner == 1 (the last dim, e.g. a row sum): a thread per row would read with stride r
//    (uncoalesced), so one warp takes a row: lanes read consecutive floats, then combine
//    with __shfl_down_sync in log2(32) = 5 steps.
// Cost: outer*r*inner reads, outer*inner writes. Sums are added in a different order than
// on the CPU, so parity tests compare with a relative tolerance.
// Read next: cuda_nn.cu.
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/backend/cuda/cuda_launch.cuh"

namespace dplab::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// (value, index) pairs combine so that the larger value wins and ties keep the first index.
struct ArgBest {
  float v;
  int64_t k;
};
__device__ inline ArgBest arg_combine(ArgBest a, ArgBest b) {
  if (b.v > a.v || (b.v == a.v && b.k < a.k)) return b;
  return a;
}

__device__ inline float combine(KReduce op, float a, float b) {
  if (op == KReduce::Sum) return a + b;
  if (op == KReduce::Max) return b > a ? b : a;
  return b < a ? b : a;
}

__global__ void reduce_columns_kernel(KReduce op, const float* x, float* out, int64_t outer,
                                      int64_t r, int64_t inner) {
  DPLAB_GRID_LOOP(j, outer * inner) {
    const int64_t o = j / inner, i = j - o * inner;
    const float* base = x + o * r * inner + i;
    float acc = base[0];
    for (int64_t k = 1; k < r; ++k) acc = combine(op, acc, base[k * inner]);
    out[j] = acc;
  }
}

__global__ void argmax_columns_kernel(const float* x, int64_t* out, int64_t outer, int64_t r,
                                      int64_t inner) {
  DPLAB_GRID_LOOP(j, outer * inner) {
    const int64_t o = j / inner, i = j - o * inner;
    const float* base = x + o * r * inner + i;
    float best = base[0];
    int64_t best_k = 0;
    for (int64_t k = 1; k < r; ++k) {
      const float v = base[k * inner];
      if (v > best) {  // strict: the first maximum wins
        best = v;
        best_k = k;
      }
    }
    out[j] = best_k;
  }
}

// One warp per row of length r (inner == 1). Lane l reads l, l+32, ...; rows < r lanes
// (r < 32) leave some lanes idle, which only matters for tiny rows.
__global__ void reduce_rows_kernel(KReduce op, const float* x, void* out, int64_t outer,
                                   int64_t r) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t o = warp; o < outer; o += n_warps) {
    const float* row = x + o * r;
    if (op == KReduce::ArgMax) {
      ArgBest best{row[0], 0};  // r >= 1 is checked on the host
      for (int64_t k = lane; k < r; k += 32) best = arg_combine(best, ArgBest{row[k], k});
      for (int off = 16; off > 0; off /= 2) {
        ArgBest other{__shfl_down_sync(kFullMask, best.v, off),
                      static_cast<int64_t>(__shfl_down_sync(kFullMask,
                                                            static_cast<long long>(best.k), off))};
        best = arg_combine(best, other);
      }
      if (lane == 0) static_cast<int64_t*>(out)[o] = best.k;
    } else {
      float acc = op == KReduce::Sum ? 0.0f : row[0];
      for (int64_t k = lane; k < r; k += 32) acc = combine(op, acc, row[k]);
      for (int off = 16; off > 0; off /= 2) {
        acc = combine(op, acc, __shfl_down_sync(kFullMask, acc, off));
      }
      if (lane == 0) static_cast<float*>(out)[o] = acc;
    }
  }
}

}  // namespace

cudaError_t launch_reduce(KReduce op, const float* x, void* out, int64_t outer, int64_t r,
                          int64_t inner, cudaStream_t s) {
  const int64_t n_out = outer * inner;
  if (n_out == 0) return cudaSuccess;
  if (r == 0) {  // the empty sum is 0 (the host rejects max / min / argmax of nothing)
    return cudaMemsetAsync(out, 0, static_cast<size_t>(n_out) * sizeof(float), s);
  }
  if (inner == 1) {
    // 32 threads per output row
    reduce_rows_kernel<<<blocks_for(outer * 32), kThreads, 0, s>>>(op, x, out, outer, r);
  } else if (op == KReduce::ArgMax) {
    argmax_columns_kernel<<<blocks_for(n_out), kThreads, 0, s>>>(
        x, static_cast<int64_t*>(out), outer, r, inner);
  } else {
    reduce_columns_kernel<<<blocks_for(n_out), kThreads, 0, s>>>(
        op, x, static_cast<float*>(out), outer, r, inner);
  }
  return cudaGetLastError();
}

}  // namespace dplab::cuda
