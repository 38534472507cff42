// cpu_gemm_lowp.cpp: GEMM on 16-bit operands (float16 / bfloat16) on the CPU.
// A CPU has no 16-bit multiply-add worth the name (AVX-512 FP16 and AMX aside), so the
// operands are converted to float32 (F16C / AVX-512 where the CPU has them, cpu_half.cpp),
// the float GEMM runs, and C is rounded back once: the same numbers a GPU's tensor cores
// give (16-bit inputs, float32 accumulation). Conversion is O(MK + KN + MN) against the
// GEMM's O(MNK), but it is extra memory traffic: on a CPU, 16-bit training is not faster.
// The float32 copies live in per-thread scratch buffers reused between calls (conv2d's
// lanes call this side by side).
// Read next: cuda/cuda_gemm_lowp.cpp (the GPU does it in one cuBLAS call), ops/matmul.cpp.
#include <vector>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_half.h"
#include "framework/error.h"

namespace dplab {
namespace {

// Elements an operand spans: `batch` matrices of `rows * cols`, `stride` apart (0: one matrix).
int64_t operand_extent(int64_t batch, int64_t stride, int64_t rows, int64_t cols) {
  return (stride == 0 || batch <= 1) ? rows * cols : (batch - 1) * stride + rows * cols;
}

float* scratch(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  return v.data();
}

}  // namespace

void CpuBackend::gemm_lowp(const GemmArgs& g, DType t, const void* a, const void* b, void* c) {
  DPLAB_CHECK(is_low_precision(t), "gemm_lowp: expected float16 or bfloat16, got {}",
              dtype_name(t));
  DPLAB_CHECK(g.batch >= 0 && g.M >= 0 && g.N >= 0 && g.K >= 0,
              "gemm_lowp: expected non-negative sizes, got batch {} M {} N {} K {}", g.batch, g.M,
              g.N, g.K);
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  thread_local std::vector<float> a32, b32, c32;
  const int64_t na = operand_extent(g.batch, g.stride_a, g.M, g.K);
  const int64_t nb = operand_extent(g.batch, g.stride_b, g.K, g.N);
  const int64_t nc = operand_extent(g.batch, g.stride_c, g.M, g.N);
  float* fa = scratch(a32, na);
  float* fb = scratch(b32, nb);
  float* fc = scratch(c32, nc);
  to_float(t, static_cast<const uint16_t*>(a), fa, na);
  to_float(t, static_cast<const uint16_t*>(b), fb, nb);
  if (g.beta != 0.0f) to_float(t, static_cast<const uint16_t*>(c), fc, nc);  // C is read
  gemm(g, fa, fb, fc);
  from_float(t, fc, static_cast<uint16_t*>(c), nc);
}

}  // namespace dplab
