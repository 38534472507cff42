// cuda_half.cu: float16 kernels (see cuda_half.h). Conversions use cuda_fp16.h's
// round-to-nearest-even intrinsics, which agree bit for bit with cpu_half.cpp's software
// conversion (both are IEEE 754 round-to-nearest-even); NaN, where cuda_fp16 has its own
// encoding (0x7fff), and reductions with NaN follow the CPU (cuda_pure.h, reduce_rule.h), so CPU and
// GPU ranks put the same bytes on the wire. One thread per element in a grid-stride loop; each kernel is memory
// bound (2 + 4 bytes moved per element for a cast).
// Read next: parallel/ddp/compression.cpp, which casts buckets before the all-reduce.
#include <cuda_fp16.h>

#include "framework/backend/cuda/cuda_half.h"
#include "framework/backend/cuda/cuda_launch.cuh"
#include "framework/backend/cuda/cuda_pure.h"
#include "framework/backend/reduce_rule.h"
#include "framework/tensor/half.h"

namespace dplab::cuda {
namespace {

static_assert(static_cast<int>(KReduce::Max) == 1 && static_cast<int>(KReduce::Min) == 2,
              "reduce_element takes ReduceKind's order");

__device__ inline float bits_to_float(uint16_t h) {
  if (half_is_nan(h)) return __uint_as_float(float_bits_from_half_nan(h));
  return __half2float(__ushort_as_half(h));
}
__device__ inline uint16_t float_to_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if (float_bits_are_nan(bits)) return half_nan_from_float_bits(bits);
  return __half_as_ushort(__float2half_rn(f));
}

__global__ void cast_f32_f16_kernel(const float* src, uint16_t* dst, int64_t n) {
  DPLAB_GRID_LOOP(i, n) { dst[i] = float_to_bits(src[i]); }
}

__global__ void cast_f16_f32_kernel(const uint16_t* src, float* dst, int64_t n) {
  DPLAB_GRID_LOOP(i, n) { dst[i] = bits_to_float(src[i]); }
}

__global__ void fill_f16_kernel(uint16_t* out, int64_t n, uint16_t v) {
  DPLAB_GRID_LOOP(i, n) { out[i] = v; }
}

// dst = half(float(dst) op float(src)): accumulate in float, round once.
__global__ void reduce_into_f16_kernel(KReduce op, uint16_t* dst, const uint16_t* src, int64_t n) {
  DPLAB_GRID_LOOP(i, n) {
    const float a = bits_to_float(dst[i]), b = bits_to_float(src[i]);
    dst[i] = float_to_bits(reduce_element(static_cast<int>(op), a, b));
  }
}

// bfloat16: float32's top half, rounded to nearest even (tensor/half.h's rule).
__device__ inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ inline float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__global__ void cast_f32_bf16_kernel(const float* src, uint16_t* dst, int64_t n) {
  DPLAB_GRID_LOOP(i, n) { dst[i] = float_to_bf16_bits(src[i]); }
}
__global__ void cast_bf16_f32_kernel(const uint16_t* src, float* dst, int64_t n) {
  DPLAB_GRID_LOOP(i, n) { dst[i] = bf16_bits_to_float(src[i]); }
}
__global__ void reduce_into_bf16_kernel(KReduce op, uint16_t* dst, const uint16_t* src, int64_t n) {
  DPLAB_GRID_LOOP(i, n) {
    const float a = bf16_bits_to_float(dst[i]), b = bf16_bits_to_float(src[i]);
    dst[i] = float_to_bf16_bits(reduce_element(static_cast<int>(op), a, b));
  }
}

}  // namespace

cudaError_t launch_cast_f32_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s) {
  if (n > 0) cast_f32_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_cast_bf16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s) {
  if (n > 0) cast_bf16_f32_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_fill_bf16(uint16_t* out, int64_t n, float v, cudaStream_t s) {
  // The one value is rounded on the host, by the scalar reference (tensor/half.h).
  const uint16_t bits = float_to_bfloat16(v);
  if (n > 0)
    fill_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, n, bits);  // 16 bits either way
  return cudaGetLastError();
}

cudaError_t launch_reduce_into_bf16(KReduce op, uint16_t* dst, const uint16_t* src, int64_t n,
                                    cudaStream_t s) {
  if (n > 0) reduce_into_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, dst, src, n);
  return cudaGetLastError();
}

cudaError_t launch_cast_f32_f16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s) {
  if (n > 0) cast_f32_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_cast_f16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s) {
  if (n > 0) cast_f16_f32_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_fill_f16(uint16_t* out, int64_t n, float v, cudaStream_t s) {
  // The one value is converted on the host (cuda_fp16's host path rounds the same way).
  uint32_t fbits = 0;
  std::memcpy(&fbits, &v, sizeof fbits);
  const uint16_t bits = float_bits_are_nan(fbits) ? half_nan_from_float_bits(fbits)
                                                  : __half_as_ushort(__float2half_rn(v));
  if (n > 0) fill_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, n, bits);
  return cudaGetLastError();
}

cudaError_t launch_reduce_into_f16(KReduce op, uint16_t* dst, const uint16_t* src, int64_t n,
                                   cudaStream_t s) {
  if (n > 0) reduce_into_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, dst, src, n);
  return cudaGetLastError();
}

}  // namespace dplab::cuda
