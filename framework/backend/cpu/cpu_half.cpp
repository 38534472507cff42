// cpu_half.cpp: float <-> half conversions: the scalar reference in portable C++ (bit
// manipulation), and the array conversions every 16-bit kernel goes through, on the CPU's
// conversion instructions where it has them (F16C: 8 at a time; AVX-512F: 16 at a time),
// chosen at run time (cpu_dispatch.cpp), so one build runs everywhere. bfloat16 needs no instruction: it is a
// float32 with 16 bits rounded off, a loop of integer ops the compiler vectorises.
// Then the 16-bit forms of cast / reduce_into / fill (see cpu_half.h).
// Layout of binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; it holds
// about 3 decimal digits and magnitudes up to 65504, which is why gradients survive the
// trip (relative error <= 2^-11) but a sum of many large values can overflow.
// Read next: parallel/ddp/compression.cpp (the fp16 communication hook).
#include "framework/backend/cpu/cpu_half.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "framework/backend/reduce_rule.h"
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

// ---- arrays: F16C / AVX-512 where the CPU has them, the scalar loop otherwise ----
namespace {

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void half_to_float_f16c(const uint16_t* s, float* d,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = half_to_float(s[i]);
}
__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* s, uint16_t* d,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = float_to_half(s[i]);
}
// GCC 12 warns falsely inside its own avx512fintrin.h (as cpu/meson.build notes for the GEMM)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void half_to_float_avx512(const uint16_t* s, float* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(d + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  for (; i < n; ++i) d[i] = half_to_float(s[i]);
}
__attribute__((target("avx512f"))) void float_to_half_avx512(const float* s, uint16_t* d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = float_to_half(s[i]);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void to_float(DType t, const uint16_t* src, float* dst, int64_t n) {
  if (t == DType::BFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
    return;
  }
#if defined(__x86_64__)
  const HalfPath path = half_path();  // cpu_dispatch.cpp's choice
  if (path == HalfPath::Avx512) return half_to_float_avx512(src, dst, n);
  if (path == HalfPath::F16c) return half_to_float_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void from_float(DType t, const float* src, uint16_t* dst, int64_t n) {
  if (t == DType::BFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
    return;
  }
#if defined(__x86_64__)
  const HalfPath path = half_path();
  if (path == HalfPath::Avx512) return float_to_half_avx512(src, dst, n);
  if (path == HalfPath::F16c) return float_to_half_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

// Conversions between any two dtypes where one side is 16-bit go through float32, in
// blocks that stay in L1 (16-bit <-> int64 truncates / rounds as float32 would).
void cpu_cast_half(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (from == to) {
    if (n > 0 && src != dst) std::memmove(dst, src, static_cast<std::size_t>(n) * 2);
    return;
  }
  if (from == DType::Float32)
    return from_float(to, static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  if (to == DType::Float32)
    return to_float(from, static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  constexpr int64_t kBlock = 1024;
  float block[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    if (from == DType::Int64) {
      const int64_t* s = static_cast<const int64_t*>(src) + i;
      for (int64_t k = 0; k < m; ++k) block[k] = static_cast<float>(s[k]);
    } else {
      to_float(from, static_cast<const uint16_t*>(src) + i, block, m);
    }
    if (to == DType::Int64) {
      int64_t* d = static_cast<int64_t*>(dst) + i;
      for (int64_t k = 0; k < m; ++k) d[k] = static_cast<int64_t>(block[k]);
    } else {
      from_float(to, block, static_cast<uint16_t*>(dst) + i, m);
    }
  }
}

void cpu_reduce_into_half(ReduceKind op, DType t, void* dst, const void* src, int64_t n) {
  DPLAB_CHECK(op != ReduceKind::ArgMax,
              "reduce_into: expected Sum, Max or Min, got ArgMax (an index has no reduction)");
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  constexpr int64_t kBlock = 512;
  float a[kBlock], b[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    to_float(t, d + i, a, m);
    to_float(t, s + i, b, m);
    for (int64_t k = 0; k < m; ++k) {
      // the CUDA kernels' rule (reduce_rule.h): the same bytes on every rank, NaN included
      a[k] = reduce_element(static_cast<int>(op), a[k], b[k]);
    }
    from_float(t, a, d + i, m);
  }
}

void cpu_fill_half(DType t, void* out, int64_t n, double value) {
  const float v = static_cast<float>(value);
  std::fill_n(static_cast<uint16_t*>(out), n,
              t == DType::BFloat16 ? float_to_bfloat16(v) : float_to_half(v));
}

}  // namespace dplab
