// master_weights.h: Apex's optimisation levels, the two that matter.
//   O1: autocast (AutocastGuard around the forward), float32 weights, GradScaler. The
//       weights and the optimizer are untouched; only the ops' dtypes change.
//   O2: the model itself is cast to 16 bits (cast_module_: every parameter except batch
//       norm's, which stays float32 as Apex's keep_batchnorm_fp32), so forward and backward
//       run in 16 bits without autocast, and the optimizer updates float32 *master* copies:
//       an update lr * g is often below half an ulp of a 16-bit weight (bfloat16's ulp at
//       1.0 is 2^-7) and would be rounded away if applied to the 16-bit weight directly.
//         auto opt = MasterWeightOptimizer(model->parameters(), [](auto masters) {
//           return std::make_unique<optim::SGD>(masters, optim::SGDOptions{.lr = 0.1}); });
//         scaler.scale(loss).backward(); scaler.step(opt); scaler.update();
//       step(): model grads -> float32 master grads (sync_grads), the inner optimizer steps
//       the masters, masters rounded into the model's 16-bit weights.
// Memory per parameter: O1 4 bytes (+ optimizer state); O2 2 (model) + 4 (master) + state.
// Read next: grad_scaler.h, tutorials/17_mixed_precision.md.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"

namespace dplab::amp {

// Casts the module's parameters (and their .grad) to dtype in place, keeping the Tensor
// handles (so an optimizer made afterwards sees them; make it afterwards). Modules whose
// name() contains "BatchNorm" keep float32 parameters when keep_batchnorm_fp32.
// Buffers (running statistics) always stay float32.
void cast_module_(nn::Module& module, DType dtype, bool keep_batchnorm_fp32 = true);

using InnerOptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

class MasterWeightOptimizer : public optim::Optimizer {
 public:
  // model_params: the (mostly 16-bit) parameters of a model after cast_module_. Masters are
  // float32 copies of each; make_inner builds the real optimizer over the masters.
  MasterWeightOptimizer(std::vector<Tensor> model_params, const InnerOptimizerFactory& make_inner);

  // model .grad -> master .grad (float32), once between zero_grad()s / steps (GradScaler's
  // unscale_ calls it, then step() must not copy the still-scaled model gradients again)
  void sync_grads() override;
  // sync_grads, inner step, masters -> model weights; the master gradients are freed (the
  // model's 16-bit ones stay, as .grad does after any step)
  void step() override;
  void zero_grad(bool set_to_none = true) override;  // the model's gradients and the masters'
  void state_dict(StateDict& tensors, Metadata& meta) const override;
  void load_state_dict(const StateDict& tensors, const Metadata& meta) override;

  const std::vector<Tensor>& model_params() const { return model_params_; }
  optim::Optimizer& inner() { return *inner_; }

 private:
  std::vector<Tensor> model_params_;
  std::unique_ptr<optim::Optimizer> inner_;
  bool synced_ = false;
};

}  // namespace dplab::amp
