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
void CpuBackend::sgd_step_kernel(const SgdArgs& a, float* param, const float* grad, float* buf,
                                 int64_t n) {
  const bool use_momentum = a.momentum != 0.0f;
  // Each element is independent: share a large tensor between the threads (see cpu_threads.h).
#pragma omp parallel for num_threads(threads_for(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] + a.weight_decay * param[i];
    if (use_momentum) {
      buf[i] = a.first_step ? g : a.momentum * buf[i] + (1.0f - a.dampening) * g;
      g = a.nesterov ? g + a.momentum * buf[i] : buf[i];
    }
    param[i] -= a.lr * g;
  }
}

// torch.optim.Adam (decoupled = false) and AdamW (decoupled = true), step t >= 1:
//   AdamW: p *= 1 - lr * wd            Adam: g = grad + wd * p
//   m = b1 * m + (1 - b1) * g          v = b2 * v + (1 - b2) * g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
void CpuBackend::adam_step_kernel(const AdamArgs& a, float* param, const float* grad, float* m, float* v,
                                  int64_t n) {
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
