// cpu_half.h: float16 (IEEE 754 binary16) on the CPU: conversions and the collectives'
// reduction. Half is a storage / wire format here (compressed gradient all-reduce), so the
// only kernels are the ones that move and add it: cast, reduce_into, fill, and the scalar
// conversions the CUDA path and tests share.
// Read next: cpu_half.cpp, parallel/ddp/compression.h.
#pragma once
#include <cstdint>

#include "framework/backend/backend.h"

namespace dplab {

// Round to nearest even; overflow goes to +-inf, tiny values to subnormals or +-0; NaN stays NaN.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

// Backend contracts (backend.h) for dtype Float16, called from CpuBackend's dispatch.
void cpu_cast_half(DType from, const void* src, DType to, void* dst, int64_t n);
// dst[i] = half(float(dst[i]) op float(src[i])): each element accumulates in float.
void cpu_reduce_into_half(ReduceKind op, void* dst, const void* src, int64_t n);
void cpu_fill_half(void* out, int64_t n, double value);

}  // namespace dplab
