// cpu_vector.h: 8 floats as one value (GCC and Clang vector extensions), at any float's
// address, and the transpose built from them: what reference/'s im2col and fast/'s
// convolution and GEMM share. SSE where AVX is not built.
// Why a type of our own: GCC compiled a memcpy of 32 bytes to 16-byte moves spilled through
// the stack, and a vector_size type declared aligned(4) loses that alignment as a template
// argument: so plain functions over two typedefs, one for registers, one for memory.
// Read next: cpu_vector.cpp.
#pragma once
#include <cstdint>

namespace dplab {

// A value in registers (32-byte aligned as a variable), and the same 8 floats in memory at
// any float's address (may_alias: it reads and writes float arrays).
typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats8Any __attribute__((vector_size(32), aligned(4), may_alias));
inline Floats8 load8(const float* p) { return *reinterpret_cast<const Floats8Any*>(p); }
inline void store8(float* p, Floats8 v) { *reinterpret_cast<Floats8Any*>(p) = v; }

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols, in 8 x 8 tiles
// (element by element, a layout change costs a strided read or write per float).
void transpose_floats(const float* src, int64_t src_stride, int64_t rows, int64_t cols, float* dst,
                      int64_t dst_stride);

}  // namespace dplab
