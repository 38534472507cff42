// cuda_pure.h: the few rules of the CUDA backend that are plain arithmetic, in one header
// that g++ and nvcc both read and that includes no CUDA header, so a machine without a GPU
// tests them (tests/backend_cuda/test_cuda_pure.cpp) and the kernels run the same code.
//  - when a device copy must go through scratch memory (overlapping ranges: memmove);
//  - how NaN is written as a half: exactly as the CPU backend (cpu_half.cpp), so CPU and
//    GPU ranks put the same bytes on the wire (the reduction's rule: ../reduce_rule.h);
//  - how a reduction is split into slices for its two passes (cuda_reduce.cu).
// Read next: cuda_half.cu, cuda_backend.cpp (copy_device).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DPLAB_HD __host__ __device__
#else
#define DPLAB_HD
#endif

namespace dplab::cuda {

// True when [a, a+n) and [b, b+n) share a byte (n > 0). The same range counts: cudaMemcpy
// leaves any overlap undefined, even a copy onto itself.
inline bool ranges_overlap(const void* a, const void* b, std::size_t n) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return n > 0 && x < y + n && y < x + n;
}

// The half NaN the CPU writes for a float NaN with these bits: its sign, all-ones exponent,
// the quiet bit, no payload (cpu_half.cpp: sign | 0x7e00). cuda_fp16's __float2half_rn
// writes 0x7fff for every NaN instead.
DPLAB_HD inline uint16_t half_nan_from_float_bits(uint32_t float_bits) {
  return static_cast<uint16_t>(((float_bits >> 16) & 0x8000u) | 0x7e00u);
}
DPLAB_HD inline bool float_bits_are_nan(uint32_t float_bits) {
  return (float_bits & 0x7fffffffu) > 0x7f800000u;
}
DPLAB_HD inline bool half_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
// A half NaN widened as the CPU does (half_to_float): sign, all-ones exponent, the 10
// payload bits moved up by 13.
DPLAB_HD inline uint32_t float_bits_from_half_nan(uint16_t h) {
  return (static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
         (static_cast<uint32_t>(h & 0x3ffu) << 13);
}

// The two-pass plan of a reduction of x as [outer, r, inner] over r (cuda_reduce.cu):
// each output's r elements are cut into `slices` slices of `slice_len` (the last shorter,
// none empty); slices < 2 means one pass. Rows (inner == 1) get a block of `threads` per
// slice, at least 16 floats per thread; columns a thread per slice, at least 16 floats.
// Either way about 2^18 threads read in pass 1, enough to keep an H100's memory busy.
struct ReducePlan {
  int64_t slices = 1;
  int64_t slice_len = 0;
};
inline ReducePlan reduce_plan(int64_t outer, int64_t r, int64_t inner, int64_t threads) {
  constexpr int64_t kTargetThreads = int64_t{1} << 18;
  constexpr int64_t kPerThread = 16;
  if (outer <= 0 || inner <= 0 || r <= 0) return {1, r};
  int64_t slices = 0;
  if (inner == 1) {
    const int64_t by_len = (r + kPerThread * threads - 1) / (kPerThread * threads);
    const int64_t by_grid = kTargetThreads / threads / outer;  // blocks per row
    slices = by_len < by_grid ? by_len : by_grid;
  } else {
    const int64_t by_len = (r + kPerThread - 1) / kPerThread;
    const int64_t by_grid = kTargetThreads / (outer * inner);
    slices = by_len < by_grid ? by_len : by_grid;
  }
  if (slices < 2) return {1, r};
  if (slices > 65535) slices = 65535;  // a grid dimension's limit (the row kernel's x)
  const int64_t len = (r + slices - 1) / slices;
  return {(r + len - 1) / len, len};  // recount: no empty slice
}

}  // namespace dplab::cuda
