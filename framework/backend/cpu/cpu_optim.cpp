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
void CpuBackend::adam_step_kernel(const AdamArgs& a, float* param, const float* grad, float* m,
                                  float* v, int64_t n) {
  // Bias corrections in double: b2^t for t in the thousands needs the precision.
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  const float step_size = static_cast<float>(a.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - a.lr * a.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (a.decoupled) {
      param[i] *= decay;
    } else {
      g += a.weight_decay * param[i];
    }
    m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    const float denom = std::sqrt(v[i]) * inv_sqrt_bc2 + a.eps;
    param[i] -= step_size * m[i] / denom;
  }
}

}  // namespace dplab
