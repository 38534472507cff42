// clip_grad.h: gradient clipping by global norm, torch.nn.utils.clip_grad_norm_.
// All gradients together are one vector g; when its length exceeds max_norm, every
// gradient is scaled by the same factor, so the step keeps its direction and only its size
// is bounded. GPT training clips at 1.0: a rare batch with a huge gradient (a loss spike)
// then cannot throw the weights far from where Adam's moments expect them.
//   loss.backward();
//   double norm = optim::clip_grad_norm_(model->parameters(), 1.0);   // log it: spikes show
//   opt.step();
// Read next: lr_scheduler.h.
#pragma once
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab::optim {

// total = sqrt(sum over parameters p with a gradient of sum(p.grad^2)); parameters whose
// grad is undefined are skipped. When scale = max_norm / (total + 1e-6) is below 1, every
// gradient is multiplied by scale in place (the 1e-6 keeps a zero norm from dividing by
// zero and leaves the clipped norm a hair under max_norm, as PyTorch's does). Returns
// total, the norm before clipping. A non-finite total is returned as it is and the scale
// is applied, as PyTorch's default does: the NaN then shows in the step, not hidden here.
// Throws unless max_norm is finite and >= 0.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace dplab::optim
