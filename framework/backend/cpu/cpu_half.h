// cpu_half.h: the 16-bit floats (float16, bfloat16) on the CPU: array conversions to and
// from float32, which every 16-bit op goes through (ops compute in float32 and round the
// result), and the backend contracts that handle 16-bit data directly: cast, fill,
// reduce_into (the collectives' reduction of low-precision gradients). Which conversion
// instructions run (HalfPath) is cpu_dispatch.h's choice.
// Read next: cpu_half.cpp, cpu_gemm_lowp.cpp, tensor/half.h (the scalar reference).
#pragma once
#include <cstdint>

#include "framework/backend/backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"  // HalfPath
#include "framework/tensor/half.h"

namespace dplab {

// dst[i] = float(src[i]) / src[i] rounded to t; t is Float16 or BFloat16.
void to_float(DType t, const uint16_t* src, float* dst, int64_t n);
void from_float(DType t, const float* src, uint16_t* dst, int64_t n);

// Backend contracts (backend.h) when either side is 16-bit, called from CpuBackend's dispatch.
void cpu_cast_half(DType from, const void* src, DType to, void* dst, int64_t n);
// dst[i] = round(float(dst[i]) op float(src[i])): each element accumulates in float.
void cpu_reduce_into_half(ReduceKind op, DType t, void* dst, const void* src, int64_t n);
void cpu_fill_half(DType t, void* out, int64_t n, double value);

}  // namespace dplab
