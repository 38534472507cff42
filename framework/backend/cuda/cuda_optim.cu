// cuda_optim.cu: fused SGD and Adam / AdamW steps, one thread per parameter element.
// Fused means one pass reads param, grad and the state once and writes them once
// (SGD with momentum: 3 reads + 2 writes per element; Adam: 4 reads + 3 writes), instead
// of a kernel per term. The formulas are torch.optim's, term for term, as on the CPU:
//   SGD:  g = grad + wd*p;  buf = first ? g : momentum*buf + (1-dampening)*g;
//         g = nesterov ? g + momentum*buf : buf;  p -= lr*g
//   Adam: AdamW: p *= 1 - lr*wd  (else g = grad + wd*p);  m = b1*m + (1-b1)*g;
//         v = b2*v + (1-b2)*g^2;  p -= (lr/bc1) * m / (sqrt(v) * (1/sqrt(bc2)) + eps)
// with bc1 = 1 - b1^t and bc2 = 1 - b2^t computed once on the host in double, and every
// float operation in the CPU backend's order, so both agree to the last bit or two.
// Read next: cuda_backend_kernels.cpp.
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/backend/cuda/cuda_launch.cuh"

namespace dplab::cuda {
namespace {

__global__ void sgd_kernel(KSgd a, float* param, const float* grad, float* buf, int64_t n) {
  DPLAB_GRID_LOOP(i, n) {
    float g = grad[i] + a.weight_decay * param[i];
    if (a.momentum != 0.0f) {
      const float b = a.first_step ? g : a.momentum * buf[i] + (1.0f - a.dampening) * g;
      buf[i] = b;
      g = a.nesterov ? g + a.momentum * b : b;
    }
    param[i] -= a.lr * g;
  }
}

__global__ void adam_kernel(KAdam a, float* param, const float* grad, float* m, float* v,
                            int64_t n) {
  const float decay = 1.0f - a.lr * a.weight_decay;
  DPLAB_GRID_LOOP(i, n) {
    float p = param[i];
    float g = grad[i];
    if (a.decoupled) {
      p *= decay;
    } else {
      g += a.weight_decay * p;
    }
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) * a.inv_sqrt_bc2 + a.eps;
    param[i] = p - a.step_size * mi / denom;
  }
}

}  // namespace

cudaError_t launch_sgd_step(const KSgd& a, float* param, const float* grad, float* buf, int64_t n,
                            cudaStream_t s) {
  if (n > 0) sgd_kernel<<<blocks_for(n), kThreads, 0, s>>>(a, param, grad, buf, n);
  return cudaGetLastError();
}

cudaError_t launch_adam_step(const KAdam& a, float* param, const float* grad, float* m, float* v,
                             int64_t n, cudaStream_t s) {
  if (n > 0) adam_kernel<<<blocks_for(n), kThreads, 0, s>>>(a, param, grad, m, v, n);
  return cudaGetLastError();
}

}  // namespace dplab::cuda
