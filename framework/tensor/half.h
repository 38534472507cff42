// half.h: one 16-bit float <-> float32, the scalar reference for both formats. These are
// what every vectorised path (F16C, AVX-512, CUDA's intrinsics) must agree with bit for bit,
// and what tests compare them to.
//   float16  (IEEE binary16): s eeeee mmmmmmmmmm       bias 15, max 65504, min normal 2^-14
//   bfloat16 (brain float)  : s eeeeeeee mmmmmmm      float32's top 16 bits: same range
// Both round to nearest, ties to even; NaN stays a (quiet) NaN; float16 overflows to +-inf
// past 65504 and flushes below 2^-25 to +-0, which is what makes loss scaling necessary.
// Read next: backend/cpu/cpu_half.cpp (the arrays), amp/grad_scaler.h (why it matters).
#pragma once
#include <cstdint>
#include <cstring>

namespace dplab {

// float16 (definitions in backend/cpu/cpu_half.cpp; portable C++, no intrinsics).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

// bfloat16 is float32 with the low 16 mantissa bits rounded away.
inline uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb =
      (x >> 16) & 1u;  // ties to even: add 0x7fff, plus 1 when the kept part is odd
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}
inline float bfloat16_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

}  // namespace dplab
