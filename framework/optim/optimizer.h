// optimizer.h: the Optimizer interface (torch.optim's). An optimizer holds the parameters
// (Tensor handles, so it sees the same storage the module trains) and per-parameter state
// allocated on each parameter's device, so that state counts in that device's memory stats.
//   optimizer.zero_grad(); loss.backward(); optimizer.step();
// Read next: sgd.h, adam.h, lr_scheduler.h.
#pragma once
#include <string>
#include <vector>

#include "framework/nn/state_dict.h"
#include "framework/tensor/tensor.h"

namespace dplab::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;

  virtual void step() = 0;
  // An optimizer that updates its own copy of the parameters (amp::MasterWeightOptimizer,
  // Apex O2's float32 master weights) fetches the model's gradients into it here;
  // amp::GradScaler calls it before it reads params()' gradients. Others have nothing to do.
  virtual void sync_grads() {}
  // set_to_none (the default, as PyTorch's): each .grad becomes undefined and the next
  // backward allocates it afresh. false: zeroed in place, so a .grad that is a view (DDP's
  // gradient_as_bucket_view) stays one and backward adds into it.
  // Virtual for optimizers that hold a second copy of the parameters (amp's master weights).
  virtual void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }  // what schedulers call
  const std::vector<Tensor>& params() const { return params_; }

  // Per-parameter state as tensors named "state.<param index>.<name>" (e.g.
  // "state.3.momentum_buffer", "state.3.exp_avg"), hyper-parameters and step counts as
  // metadata ("optim.type", "optim.lr", ...). load_state_dict checks the type and the
  // number and shapes of parameters, and copies state onto each parameter's device.
  virtual void state_dict(StateDict& tensors, Metadata& meta) const = 0;
  virtual void load_state_dict(const StateDict& tensors, const Metadata& meta) = 0;
  // Bytes of the state tensors (momentum, Adam's moments): what memory reports count as
  // optimizer state (ZeRO's shards, a parameter server's shard).
  int64_t state_bytes() const;

 protected:
  std::vector<Tensor> params_;
  double lr_ = 0.0;
};

}  // namespace dplab::optim
