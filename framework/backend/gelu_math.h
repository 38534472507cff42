// gelu_math.h: GELU and its derivative, written once for every backend: plain C++ that
// g++ (cpu_elementwise.cpp) and nvcc (cuda_elementwise.cu) both compile, with no CUDA header.
// GELU weighs x by the probability that a standard normal variable is below it:
//   gelu(x)  = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
//   gelu'(x) = Phi(x) + x phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// GPT-2 (and BERT) use the tanh approximation, torch's approximate="tanh":
//   gelu_tanh(x)  = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu_tanh'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// The two differ by at most 4.7e-4 (near x = -2.7).
// Read next: ops/nn_transformer.cpp (the op and its backward).
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define DPLAB_GELU_HD __host__ __device__
#else
#define DPLAB_GELU_HD
#endif

namespace dplab::gelu_math {

constexpr float kInvSqrt2 = 0.70710678118654752f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

DPLAB_GELU_HD inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }

DPLAB_GELU_HD inline float gelu_grad(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

DPLAB_GELU_HD inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

DPLAB_GELU_HD inline float gelu_tanh_grad(float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
}

}  // namespace dplab::gelu_math
