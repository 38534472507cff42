// adam.h: Adam and AdamW, torch.optim's semantics exactly (the fused backend kernel
// adam_step; the formula is written out in backend/cpu/cpu_optim.cpp).
//   optim::Adam opt(params, {.lr = 1e-3, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0});
//   optim::AdamW opt(params, {.lr = 1e-3});   // decoupled weight decay, 0.01 by default
//   optim::AdamW opt(optim::decay_groups(*model, 0.1), {.lr = 6e-4});   // per-group decay
// Adam adds weight decay to the gradient (L2); AdamW shrinks the weights directly,
// p *= 1 - lr * wd, which Loshchilov & Hutter showed works better with adaptive steps.
// State: exp_avg (m) and exp_avg_sq (v) per parameter on its device, +2x parameter memory,
// and a step count per parameter (a parameter without a gradient does not advance).
// Read next: param_groups.h, lr_scheduler.h.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/optim/optimizer.h"
#include "framework/optim/param_groups.h"

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
  // Parameter groups: params() is the groups' parameters one after another, and a group's
  // weight_decay (when set) replaces options.weight_decay for its parameters. lr and the
  // other options are shared: a scheduler's set_lr reaches every group.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});

  void step() override;
  const AdamOptions& options() const { return options_; }
  int64_t step_count(size_t param_index) const { return steps_.at(param_index); }
  size_t num_groups() const { return group_sizes_.size(); }
  double group_weight_decay(size_t group) const { return group_decay_.at(group); }

  // Tensors "state.<i>.exp_avg" and "state.<i>.exp_avg_sq", metadata "state.<i>.step" for
  // parameters that have stepped; optim.type ("Adam" or "AdamW"), optim.lr, optim.beta1,
  // optim.beta2, optim.eps, optim.weight_decay, optim.num_params. With more than one group
  // also optim.num_groups and per group optim.group.<g>.num_params and
  // optim.group.<g>.weight_decay (a single group writes the plain format, so older
  // checkpoints and ZeRO's shards read the same). The saved decays win on load, as torch's
  // param_groups do; the group sizes must match. The tensors share storage with the live
  // state (as torch's do): write them out before stepping again.
  void state_dict(StateDict& tensors, Metadata& meta) const override;
  void load_state_dict(const StateDict& tensors, const Metadata& meta) override;

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);

 private:
  const char* type_name() const { return decoupled_ ? "AdamW" : "Adam"; }
  double weight_decay_of(size_t param_index) const;
  std::vector<double> load_group_decay(const Metadata& meta, double plain_decay) const;

  AdamOptions options_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // undefined until the parameter's first step
  std::vector<int64_t> steps_;
  std::vector<size_t> group_sizes_;  // parameters per group, in params() order
  std::vector<double> group_decay_;  // each group's weight decay, resolved
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace dplab::optim
