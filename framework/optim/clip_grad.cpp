// clip_grad.cpp: one pass to measure the global norm, one to scale. Each gradient's sum of
// squares is reduced on its own device (one number comes back to the host) and the total
// is added up in double, so parameters spread over devices clip together.
// Read next: lr_scheduler.cpp.
#include "framework/optim/clip_grad.h"

#include <cmath>

#include "framework/autograd/grad_mode.h"
#include "framework/error.h"
#include "framework/ops/ops.h"

namespace dplab::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  DPLAB_CHECK(std::isfinite(max_norm) && max_norm >= 0.0,
              "clip_grad_norm_: max_norm must be a finite value >= 0, got {}", max_norm);
  NoGradGuard no_grad;
  double sum_squares = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    const Tensor g32 = g.dtype() == DType::Float32 ? g : g.to(DType::Float32);
    sum_squares += static_cast<double>(sum(g32 * g32).item());
  }
  const double total = std::sqrt(sum_squares);
  const double scale = max_norm / (total + 1e-6);
  // a NaN total fails every comparison: `!(scale >= 1)` lets it through to the gradients
  if (!(scale >= 1.0))
    for (const Tensor& p : params)
      if (Tensor g = p.grad(); g.defined()) g.mul_(static_cast<float>(scale));
  return total;
}

}  // namespace dplab::optim
