// cpu_half.cpp: float <-> half conversions in portable C++ (bit manipulation, no F16C
// intrinsics, so the build does not depend on the instruction set), and the float16 forms
// of cast / reduce_into / fill (see cpu_half.h).
// Layout of binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; it holds
// about 3 decimal digits and magnitudes up to 65504, which is why gradients survive the
// trip (relative error <= 2^-11) but a sum of many large values can overflow.
// Read next: parallel/ddp/compression.cpp (the fp16 communication hook).
#include "framework/backend/cpu/cpu_half.h"

#include <algorithm>
#include <cstring>

#include "framework/error.h"

namespace dplab {

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf or NaN (keep NaN quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;  // with the implicit 1
    const uint32_t shift = 126u - e;                   // 14..24: aligns to 2^-24 units
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
    if (rem > half_ulp || (rem == half_ulp && (h & 1u))) ++h;  // to nearest, ties to even
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias the exponent (127 -> 15), keep 10 mantissa bits, round to nearest even.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may bump the exponent: right
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t x;
  if (e == 0x1fu) {
    x = sign | 0x7f800000u | (m << 13);  // inf / NaN
  } else if (e != 0) {
    x = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0) {
    x = sign;
  } else {  // subnormal: m * 2^-24, renormalise
    int shift = 0;
    uint32_t mm = m;
    while (!(mm & 0x400u)) {
      mm <<= 1;
      ++shift;
    }
    x = sign | ((113u - static_cast<uint32_t>(shift)) << 23) | ((mm & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

void cpu_cast_half(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (from == DType::Float32 && to == DType::Float16) {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_half(s[i]);
  } else if (from == DType::Float16 && to == DType::Float32) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = half_to_float(s[i]);
  } else if (from == to) {
    if (n > 0 && src != dst) std::memmove(dst, src, static_cast<std::size_t>(n) * 2);
  } else {
    DPLAB_FAIL("cast: float16 converts to and from float32 only, got {} -> {}", dtype_name(from),
               dtype_name(to));
  }
}

void cpu_reduce_into_half(ReduceKind op, void* dst, const void* src, int64_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    const float a = half_to_float(d[i]), b = half_to_float(s[i]);
    float r = 0.0f;
    switch (op) {
      case ReduceKind::Sum: r = a + b; break;
      case ReduceKind::Max: r = std::max(a, b); break;
      case ReduceKind::Min: r = std::min(a, b); break;
      case ReduceKind::ArgMax:
        DPLAB_FAIL("reduce_into: expected Sum, Max or Min, got ArgMax (an index has no reduction)");
    }
    d[i] = float_to_half(r);
  }
}

void cpu_fill_half(void* out, int64_t n, double value) {
  std::fill_n(static_cast<uint16_t*>(out), n, float_to_half(static_cast<float>(value)));
}

}  // namespace dplab
