// adam.h: Adam and AdamW, torch.optim's semantics exactly (the fused backend kernel
// adam_step; the formula is written out in backend/cpu/cpu_optim.cpp).
//   optim::Adam opt(params, {.lr = 1e-3, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0});
//   optim::AdamW opt(params, {.lr = 1e-3});   // decoupled weight decay, 0.01 by default
// Adam adds weight decay to the gradient (L2); AdamW shrinks the weights directly,
// p *= 1 - lr * wd, which Loshchilov & Hutter showed works better with adaptive steps.
// State: exp_avg (m) and exp_avg_sq (v) per parameter on its device, +2x parameter memory,
// and a step count per parameter (a parameter without a gradient does not advance).
// Read next: lr_scheduler.h.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/optim/optimizer.h"

namespace dplab::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// The same knobs; only the default weight decay differs (torch.optim.AdamW's 0.01).
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class Adam : public Optimizer {
 public:
  // Throws on lr, eps or weight_decay < 0 and on betas outside [0, 1).
  Adam(std::vector<Tensor> params, AdamOptions options = {});

  void step() override;
  const AdamOptions& options() const { return options_; }
  int64_t step_count(size_t param_index) const { return steps_.at(param_index); }

  // Tensors "state.<i>.exp_avg" and "state.<i>.exp_avg_sq", metadata "state.<i>.step" for
  // parameters that have stepped; optim.type ("Adam" or "AdamW"), optim.lr, optim.beta1,
  // optim.beta2, optim.eps, optim.weight_decay, optim.num_params. The tensors share storage
  // with the live state (as torch's do): write them out before stepping again.
  void state_dict(StateDict& tensors, Metadata& meta) const override;
  void load_state_dict(const StateDict& tensors, const Metadata& meta) override;

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled);

 private:
  const char* type_name() const { return decoupled_ ? "AdamW" : "Adam"; }

  AdamOptions options_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // undefined until the parameter's first step
  std::vector<int64_t> steps_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
};

}  // namespace dplab::optim
