// cpu_optim.cpp: fused SGD and Adam(W) updates on the CPU, one pass over the parameter.
// The formulas are torch.optim's, term for term, so a model trained here and in PyTorch
// follows the same trajectory (up to float rounding). Optimizer state (momentum buffer,
// Adam's m and v) lives next to the parameter; framework/optim/ owns it and the step count.
// Cost: one read of grad and state, one write of param and state, per element.
// Read next: framework/optim/.
#include <cmath>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"

namespace dplab {

// torch.optim.SGD:
//   g = grad + wd * p
//   buf = first_step ? g : momentum * buf + (1 - dampening) * g      (only if momentum != 0)
//   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// One loop per case, with the hyper-parameters in locals and the buffers marked __restrict:
// read through `a` inside the loop, every store to param could (as far as the compiler
// knows) change a.lr, so a loop that reads them through `a` reloads all four per element
// and runs scalar.
namespace {

template <bool kMomentum, bool kFirst, bool kNesterov>
void sgd_range(float lr, float momentum, float dampening, float wd, float* __restrict param,
               const float* __restrict grad, float* __restrict buf, int64_t begin, int64_t end) {
  const float keep = 1.0f - dampening;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float g = grad[i] + wd * param[i];
    if constexpr (kMomentum) {
      const float b = kFirst ? g : momentum * buf[i] + keep * g;
      buf[i] = b;
      g = kNesterov ? g + momentum * b : b;
    }
    param[i] -= lr * g;
  }
}

using SgdRange = void (*)(float, float, float, float, float*, const float*, float*, int64_t,
                          int64_t);

SgdRange pick_sgd_range(bool momentum, bool first, bool nesterov) {
  if (!momentum) return sgd_range<false, false, false>;
  if (first) return nesterov ? sgd_range<true, true, true> : sgd_range<true, true, false>;
  return nesterov ? sgd_range<true, false, true> : sgd_range<true, false, false>;
}

}  // namespace

void CpuBackend::sgd_step_kernel(const SgdArgs& a, float* param, const float* grad, float* buf,
                                 int64_t n) {
  const SgdRange range = pick_sgd_range(a.momentum != 0.0f, a.first_step, a.nesterov);
  const float lr = a.lr, momentum = a.momentum, dampening = a.dampening, wd = a.weight_decay;
  const int threads = threads_for(n);
  if (threads == 1) return range(lr, momentum, dampening, wd, param, grad, buf, 0, n);
    // Each element is independent: share a large tensor between the threads (see cpu_threads.h),
    // each a contiguous block.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t)
    range(lr, momentum, dampening, wd, param, grad, buf, n * t / threads, n * (t + 1) / threads);
}

// torch.optim.Adam (decoupled = false) and AdamW (decoupled = true), step t >= 1:
//   AdamW: p *= 1 - lr * wd            Adam: g = grad + wd * p
//   m = b1 * m + (1 - b1) * g          v = b2 * v + (1 - b2) * g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// As sgd_range: hyper-parameters in locals, buffers __restrict, one loop per case, so the
// loop vectorises, sqrt and divide included. That also needs -fno-math-errno, which this file
// alone is built with (meson.build): else sqrt of a negative must set errno, a branch and a
// call per element that keep the loop scalar (v >= 0 here, so nothing is lost). sqrt and
// divide are IEEE-exact in vector and scalar form, so a parameter's result does not depend on
// where a thread's or a ZeRO shard's range begins. Scalar, with the settings read through `a`
// per element, this was 2.8% of a small GPT's training step on one thread.
namespace {

struct AdamConsts {
  float step_size, inv_sqrt_bc2, decay, wd, beta1, beta2, eps;
};

template <bool kDecoupled>
void adam_range(AdamConsts k, float* __restrict param, const float* __restrict grad,
                float* __restrict m, float* __restrict v, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float g = grad[i];
    float p = param[i];
    if constexpr (kDecoupled) {
      p *= k.decay;
    } else {
      g += k.wd * p;
    }
    const float mi = k.beta1 * m[i] + (1.0f - k.beta1) * g;
    const float vi = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = p - k.step_size * mi / (std::sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
  }
}

}  // namespace

void CpuBackend::adam_step_kernel(const AdamArgs& a, float* param, const float* grad, float* m,
                                  float* v, int64_t n) {
  // Bias corrections in double: b2^t for t in the thousands needs the precision.
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  const AdamConsts k{.step_size = static_cast<float>(a.lr / bc1),
                     .inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2)),
                     .decay = 1.0f - a.lr * a.weight_decay,
                     .wd = a.weight_decay,
                     .beta1 = a.beta1,
                     .beta2 = a.beta2,
                     .eps = a.eps};
  const auto range = a.decoupled ? adam_range<true> : adam_range<false>;
  const int threads = threads_for(n);
  if (threads == 1) return range(k, param, grad, m, v, 0, n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t)
    range(k, param, grad, m, v, n * t / threads, n * (t + 1) / threads);
}

}  // namespace dplab
