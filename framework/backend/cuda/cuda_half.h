// cuda_half.h: launchers of the float16 kernels (cuda_half.cu), plain C++ like
// cuda_kernels.h. Half is a wire format here (fp16 gradient compression): the kernels cast
// float32 <-> float16, fill, and reduce one buffer into another with each element added in
// float and rounded back to half (the same contract as the CPU's cpu_half.cpp).
// Read next: cuda_half.cu; backend/cpu/cpu_half.h for the CPU reference.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "framework/backend/cuda/cuda_kernels.h"

namespace dplab::cuda {

// Halves are passed as their bit patterns (uint16_t), as dplab stores them.
cudaError_t launch_cast_f32_f16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);
cudaError_t launch_cast_f16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s);
cudaError_t launch_fill_f16(uint16_t* out, int64_t n, float v, cudaStream_t s);
cudaError_t launch_reduce_into_f16(KReduce op, uint16_t* dst, const uint16_t* src, int64_t n,
                                   cudaStream_t s);

// bfloat16 (mixed precision, amp/): the same four, with tensor/half.h's rounding written out
// in integer ops, so CPU and GPU agree bit for bit.
cudaError_t launch_cast_f32_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);
cudaError_t launch_cast_bf16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s);
cudaError_t launch_fill_bf16(uint16_t* out, int64_t n, float v, cudaStream_t s);
cudaError_t launch_reduce_into_bf16(KReduce op, uint16_t* dst, const uint16_t* src, int64_t n,
                                    cudaStream_t s);

}  // namespace dplab::cuda
