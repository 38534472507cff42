// sgd.h: stochastic gradient descent with momentum, dampening, Nesterov and weight decay,
// torch.optim.SGD's semantics exactly (the update is the fused backend kernel sgd_step,
// written out in backend/cpu/cpu_optim.cpp).
//   optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
// State: one momentum buffer per parameter (only when momentum != 0), made on the first
// step the parameter has a gradient, on the parameter's device: +1x parameter memory.
// Read next: adam.h.
#pragma once
#include <vector>

#include "framework/optim/optimizer.h"

namespace dplab::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  // Throws on lr, momentum or weight_decay < 0, and on nesterov without momentum or with
  // dampening (PyTorch's rule: Nesterov's look-ahead is defined for undamped momentum).
  SGD(std::vector<Tensor> params, SGDOptions options = {});

  void step() override;
  const SGDOptions& options() const { return options_; }

  // Tensors "state.<i>.momentum_buffer" for parameters that have one; metadata optim.type
  // = "SGD", optim.lr, optim.momentum, optim.dampening, optim.weight_decay, optim.nesterov,
  // optim.num_params. Loading restores the hyper-parameters too (as torch's param_groups).
  // The tensors share storage with the live buffers (as torch's do): write them out before
  // stepping again.
  void state_dict(StateDict& tensors, Metadata& meta) const override;
  void load_state_dict(const StateDict& tensors, const Metadata& meta) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until the parameter's first step
};

}  // namespace dplab::optim
