// cuda_reduce.cu: sum / max / min / argmax of x viewed as [outer, r, inner] over r.
// A reduction moves outer*r*inner floats and writes outer*inner: it is memory bound, so the
// whole GPU must be reading. Three shapes of work, picked by the shape:
//  - many outputs (outer*inner large): one thread per output walks k = 0..r-1 (inner > 1:
//    neighbouring threads read neighbouring i, coalesced), or one warp per row (inner == 1:
//    lanes read consecutive floats, then __shfl_down_sync in 5 steps);
//  - few long rows (inner == 1, e.g. the whole tensor: outer = 1): TWO PASSES. Pass 1 splits
//    each row into P slices, one 256-thread block each (warp shuffles, then shared memory),
//    and writes P partials per row; pass 2 reduces each row's P partials with one warp.
//  - few long columns (inner > 1, outer*inner small): two passes too. Pass 1 gives each
//    thread a slice of r for one output, P slices per output, written as [outer, P, inner];
//    pass 2 gives each output a warp over its P partials.
// P is chosen so that about kTargetThreads threads read in pass 1 (an H100 holds 270K);
// the partials (scratch from the caller, reduce_scratch_bytes) are a few KiB to MiB.
// Argmax partials carry (value, index); ties keep the first index, so the answer is the
// one-pass answer. Sums are added in another order than on the CPU: parity tests compare
// with a relative tolerance. Max / Min start from -inf / +inf in the two-pass kernels.
// Read next: cuda_nn.cu.
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/backend/cuda/cuda_launch.cuh"
#include "framework/backend/cuda/cuda_pure.h"

namespace dplab::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarps = kThreads / 32;
using Plan = ReducePlan;

Plan plan_for(int64_t outer, int64_t r, int64_t inner) {
  return reduce_plan(outer, r, inner, kThreads);
}

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
        ArgBest other{
            __shfl_down_sync(kFullMask, best.v, off),
            static_cast<int64_t>(__shfl_down_sync(kFullMask, static_cast<long long>(best.k), off))};
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

__device__ inline float identity(KReduce op) {
  return op == KReduce::Sum ? 0.0f : op == KReduce::Max ? -INFINITY : INFINITY;
}

// Pass 1 for rows: block (b, o) reduces x[o, b*len .. (b+1)*len) into part[o * P + b]
// (and its index, for argmax, into part_k).
__global__ void row_slices_kernel(KReduce op, const float* x, int64_t r, int64_t len, float* part,
                                  int64_t* part_k) {
  __shared__ float s_v[kWarps];
  __shared__ int64_t s_k[kWarps];
  const int64_t o = blockIdx.y, b = blockIdx.x;
  const float* row = x + o * r;
  const int64_t begin = b * len, end = begin + len < r ? begin + len : r;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (op == KReduce::ArgMax) {
    ArgBest best{-INFINITY, INT64_MAX};
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x)
      best = arg_combine(best, ArgBest{row[k], k});
    for (int off = 16; off > 0; off /= 2)
      best = arg_combine(best, ArgBest{__shfl_down_sync(kFullMask, best.v, off),
                                       static_cast<int64_t>(__shfl_down_sync(
                                           kFullMask, static_cast<long long>(best.k), off))});
    if (lane == 0) {
      s_v[warp] = best.v;
      s_k[warp] = best.k;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w) best = arg_combine(best, ArgBest{s_v[w], s_k[w]});
      // a slice whose values are all -inf keeps its first index
      part[o * gridDim.x + b] = best.v;
      part_k[o * gridDim.x + b] = best.k == INT64_MAX ? begin : best.k;
    }
    return;
  }
  float acc = identity(op);
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) acc = combine(op, acc, row[k]);
  for (int off = 16; off > 0; off /= 2)
    acc = combine(op, acc, __shfl_down_sync(kFullMask, acc, off));
  if (lane == 0) s_v[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) acc = combine(op, acc, s_v[w]);
    part[o * gridDim.x + b] = acc;
  }
}

// Pass 2 for rows: one warp per row over its P partials, in slice order.
__global__ void row_partials_kernel(KReduce op, const float* part, const int64_t* part_k,
                                    int64_t slices, void* out, int64_t outer) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= outer) return;
  const float* p = part + warp * slices;
  if (op == KReduce::ArgMax) {
    const int64_t* pk = part_k + warp * slices;
    ArgBest best{-INFINITY, INT64_MAX};
    for (int64_t c = lane; c < slices; c += 32) best = arg_combine(best, ArgBest{p[c], pk[c]});
    for (int off = 16; off > 0; off /= 2)
      best = arg_combine(best, ArgBest{__shfl_down_sync(kFullMask, best.v, off),
                                       static_cast<int64_t>(__shfl_down_sync(
                                           kFullMask, static_cast<long long>(best.k), off))});
    if (lane == 0) static_cast<int64_t*>(out)[warp] = best.k == INT64_MAX ? 0 : best.k;
    return;
  }
  float acc = identity(op);
  for (int64_t c = lane; c < slices; c += 32) acc = combine(op, acc, p[c]);
  for (int off = 16; off > 0; off /= 2)
    acc = combine(op, acc, __shfl_down_sync(kFullMask, acc, off));
  if (lane == 0) static_cast<float*>(out)[warp] = acc;
}

// Pass 1 for columns: thread (o, c, i) reduces x[o, c*len .. (c+1)*len, i] into
// part[(o * P + c) * inner + i]; neighbouring threads take neighbouring i (coalesced).
__global__ void column_slices_kernel(KReduce op, const float* x, int64_t outer, int64_t r,
                                     int64_t inner, int64_t slices, int64_t len, float* part,
                                     int64_t* part_k) {
  DPLAB_GRID_LOOP(j, outer * slices * inner) {
    const int64_t i = j % inner, c = (j / inner) % slices, o = j / (inner * slices);
    const float* base = x + o * r * inner + i;
    const int64_t begin = c * len, end = begin + len < r ? begin + len : r;
    float acc = base[begin * inner];
    int64_t best_k = begin;
    for (int64_t k = begin + 1; k < end; ++k) {
      const float v = base[k * inner];
      if (op == KReduce::ArgMax) {
        if (v > acc) {  // strict: the first maximum wins
          acc = v;
          best_k = k;
        }
      } else {
        acc = combine(op, acc, v);
      }
    }
    part[j] = acc;
    if (op == KReduce::ArgMax) part_k[j] = best_k;
  }
}

// Pass 2 for columns: one warp per output (o, i) over its P partials (lane l takes slices
// l, l+32, ...), so even P in the thousands costs each lane a few dozen loads from L2.
__global__ void column_partials_kernel(KReduce op, const float* part, const int64_t* part_k,
                                       void* out, int64_t outer, int64_t slices, int64_t inner) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t j = warp; j < outer * inner; j += n_warps) {
    const int64_t o = j / inner, i = j - o * inner;
    const int64_t at = o * slices * inner + i;  // slice c of output j is at + c * inner
    if (op == KReduce::ArgMax) {
      ArgBest best{-INFINITY, INT64_MAX};
      for (int64_t c = lane; c < slices; c += 32)
        best = arg_combine(best, ArgBest{part[at + c * inner], part_k[at + c * inner]});
      for (int off = 16; off > 0; off /= 2)
        best = arg_combine(best, ArgBest{__shfl_down_sync(kFullMask, best.v, off),
                                         static_cast<int64_t>(__shfl_down_sync(
                                             kFullMask, static_cast<long long>(best.k), off))});
      if (lane == 0) static_cast<int64_t*>(out)[j] = best.k == INT64_MAX ? 0 : best.k;
    } else {
      float acc = identity(op);
      for (int64_t c = lane; c < slices; c += 32) acc = combine(op, acc, part[at + c * inner]);
      for (int off = 16; off > 0; off /= 2)
        acc = combine(op, acc, __shfl_down_sync(kFullMask, acc, off));
      if (lane == 0) static_cast<float*>(out)[j] = acc;
    }
  }
}
}  // namespace

std::size_t reduce_scratch_bytes(KReduce op, int64_t outer, int64_t r, int64_t inner) {
  if (outer * inner == 0 || r == 0) return 0;
  const Plan p = plan_for(outer, r, inner);
  if (p.slices < 2) return 0;
  const std::size_t per = sizeof(float) + (op == KReduce::ArgMax ? sizeof(int64_t) : 0);
  return static_cast<std::size_t>(outer * p.slices * inner) * per + 8;  // + index alignment
}

cudaError_t launch_reduce(KReduce op, const float* x, void* out, int64_t outer, int64_t r,
                          int64_t inner, void* scratch, cudaStream_t s) {
  const int64_t n_out = outer * inner;
  if (n_out == 0) return cudaSuccess;
  if (r == 0) {  // the empty sum is 0 (the host rejects max / min / argmax of nothing)
    return cudaMemsetAsync(out, 0, static_cast<size_t>(n_out) * sizeof(float), s);
  }
  const Plan p = plan_for(outer, r, inner);
  if (p.slices >= 2) {
    if (scratch == nullptr) return cudaErrorInvalidValue;  // reduce_scratch_bytes was not asked
    // partials first (floats), then their indices (int64, 8-byte aligned: n_part*4 rounded)
    const int64_t n_part = outer * p.slices * inner;
    auto* part = static_cast<float*>(scratch);
    int64_t* part_k =
        op == KReduce::ArgMax
            ? reinterpret_cast<int64_t*>(static_cast<char*>(scratch) + ((n_part * 4 + 7) / 8) * 8)
            : nullptr;
    if (inner == 1) {
      row_slices_kernel<<<dim3(static_cast<unsigned>(p.slices), static_cast<unsigned>(outer)),
                          kThreads, 0, s>>>(op, x, r, p.slice_len, part, part_k);
      row_partials_kernel<<<blocks_for(outer * 32), kThreads, 0, s>>>(op, part, part_k, p.slices,
                                                                      out, outer);
    } else {
      column_slices_kernel<<<blocks_for(n_part), kThreads, 0, s>>>(op, x, outer, r, inner, p.slices,
                                                                   p.slice_len, part, part_k);
      column_partials_kernel<<<blocks_for(n_out * 32), kThreads, 0, s>>>(op, part, part_k, out,
                                                                         outer, p.slices, inner);
    }
    return cudaGetLastError();
  }
  if (inner == 1) {
    // 32 threads per output row
    reduce_rows_kernel<<<blocks_for(outer * 32), kThreads, 0, s>>>(op, x, out, outer, r);
  } else if (op == KReduce::ArgMax) {
    argmax_columns_kernel<<<blocks_for(n_out), kThreads, 0, s>>>(x, static_cast<int64_t*>(out),
                                                                 outer, r, inner);
  } else {
    reduce_columns_kernel<<<blocks_for(n_out), kThreads, 0, s>>>(op, x, static_cast<float*>(out),
                                                                 outer, r, inner);
  }
  return cudaGetLastError();
}

}  // namespace dplab::cuda
