// reduce_rule.h: reduce_into's element rule, dst = dst op src, for the 16-bit types, as
// plain arithmetic that g++ and nvcc both compile: the CPU backend (cpu_half.cpp) and the
// CUDA kernels (cuda_half.cu) call this one function, so CPU and GPU ranks put the same
// bytes on the wire even where a NaN appears.
// The hardware alone would not agree: an x86 add returns its first NaN operand, a GPU add
// returns its canonical NaN (0x7fffffff); inf + -inf is a negative NaN on x86 and a positive
// one on a GPU; and a compiler may swap an add's operands. So NaN is decided here, not by
// the add. Read next: cpu/cpu_half.cpp, cuda/cuda_half.cu.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DPLAB_REDUCE_HD __host__ __device__
#else
#define DPLAB_REDUCE_HD
#endif

namespace dplab {

// op: 0 sum, 1 max, 2 min (ReduceKind's order). Max and Min are std::max(dst, src) and
// std::min(dst, src): a NaN already in dst stays, a NaN arriving in src is dropped (fmaxf /
// fminf would drop both). Sum: dst's NaN if dst is NaN, else src's, else a NaN that the add
// made (inf + -inf) is the positive quiet NaN 0x7fc00000.
DPLAB_REDUCE_HD inline float reduce_element(int op, float dst, float src) {
  if (op == 1) return dst < src ? src : dst;
  if (op == 2) return src < dst ? src : dst;
  const float sum = dst + src;
  if (sum == sum) return sum;
  if (dst != dst) return dst;
  if (src != src) return src;
  const uint32_t quiet_nan = 0x7fc00000u;
  float out;
  std::memcpy(&out, &quiet_nan, sizeof out);
  return out;
}

}  // namespace dplab
