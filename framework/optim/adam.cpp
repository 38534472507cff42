// adam.cpp: Adam's step is one fused kernel per parameter on its device (backend adam_step):
//   AdamW: p *= 1 - lr * wd          Adam: g = grad + wd * p
//   m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// This file owns the state (m, v, t), each parameter group's decay, and the state-dict
// round trip of both.
// Read next: lr_scheduler.cpp.
#include "framework/optim/adam.h"

#include <fmt/format.h>

#include "framework/backend/backend.h"
#include "framework/optim/optim_state.h"

namespace dplab::optim {
namespace {

// "optim.group.<g>.<name>"
std::string group_key(size_t g, const char* name) {
  return fmt::format("optim.group.{}.{}", g, name);
}

void check_options(const char* type, const AdamOptions& o) {
  detail::check_non_negative(type, "lr", o.lr);
  detail::check_non_negative(type, "eps", o.eps);
  detail::check_non_negative(type, "weight_decay", o.weight_decay);
  DPLAB_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0,
              "{}: invalid beta1: expected in [0, 1), got {}", type, o.betas.first);
  DPLAB_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0,
              "{}: invalid beta2: expected in [0, 1), got {}", type, o.betas.second);
}

std::vector<Tensor> all_params(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{{.params = std::move(params)}}, options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(all_params(groups)), options_(options), decoupled_(decoupled),
      exp_avg_(params_.size()), exp_avg_sq_(params_.size()), steps_(params_.size(), 0) {
  check_options(type_name(), options_);
  DPLAB_CHECK(!groups.empty(), "{}: expected at least one parameter group", type_name());
  for (size_t g = 0; g < groups.size(); ++g) {
    const double decay = groups[g].weight_decay.value_or(options_.weight_decay);
    detail::check_non_negative(type_name(), fmt::format("weight_decay of group {}", g).c_str(),
                               decay);
    group_sizes_.push_back(groups[g].params.size());
    group_decay_.push_back(decay);
  }
  // One group is the plain optimizer: its decay is the one optim.weight_decay records.
  if (groups.size() == 1) options_.weight_decay = group_decay_[0];
  lr_ = options_.lr;
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : AdamW(std::vector<ParamGroup>{{.params = std::move(params)}}, o) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam(std::move(groups),
           AdamOptions{.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay},
           true) {}

double Adam::weight_decay_of(size_t param_index) const {
  size_t g = 0, end = group_sizes_[0];
  while (param_index >= end) end += group_sizes_[++g];
  return group_decay_[g];
}

void Adam::step() {
  DPLAB_CHECK(lr_ >= 0.0, "{}: invalid lr: expected >= 0, got {} (set by set_lr?)", type_name(),
              lr_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = detail::checked_grad(type_name(), params_, i);
    if (!grad.defined()) continue;  // no gradient: no update and no step count (PyTorch)
    Tensor& p = params_[i];
    if (!exp_avg_[i].defined()) {
      // m and v start at zero; the bias corrections 1 - b^t undo that start.
      exp_avg_[i] = detail::zeros_like_param(p);
      exp_avg_sq_[i] = detail::zeros_like_param(p);
    }
    ++steps_[i];
    AdamArgs args{.lr = static_cast<float>(lr_),
                  .beta1 = static_cast<float>(options_.betas.first),
                  .beta2 = static_cast<float>(options_.betas.second),
                  .eps = static_cast<float>(options_.eps),
                  .weight_decay = static_cast<float>(weight_decay_of(i)),
                  .decoupled = decoupled_,
                  .step = steps_[i]};
    backend_for(p.device())
        .adam_step(args, p.data<float>(), grad.data<float>(), exp_avg_[i].data<float>(),
                   exp_avg_sq_[i].data<float>(), p.numel());
  }
}

void Adam::state_dict(StateDict& tensors, Metadata& meta) const {
  meta["optim.type"] = type_name();
  meta["optim.num_params"] = std::to_string(params_.size());
  meta["optim.lr"] = detail::format_double(lr_);
  meta["optim.beta1"] = detail::format_double(options_.betas.first);
  meta["optim.beta2"] = detail::format_double(options_.betas.second);
  meta["optim.eps"] = detail::format_double(options_.eps);
  meta["optim.weight_decay"] = detail::format_double(options_.weight_decay);
  if (num_groups() > 1) {
    meta["optim.num_groups"] = std::to_string(num_groups());
    for (size_t g = 0; g < num_groups(); ++g) {
      meta[group_key(g, "num_params")] = std::to_string(group_sizes_[g]);
      meta[group_key(g, "weight_decay")] = detail::format_double(group_decay_[g]);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    tensors.insert(detail::state_key(i, "exp_avg"), exp_avg_[i]);
    tensors.insert(detail::state_key(i, "exp_avg_sq"), exp_avg_sq_[i]);
    meta[detail::state_key(i, "step")] = std::to_string(steps_[i]);
  }
}

// The groups' decays a state dict holds, checked against this optimizer's groups: the
// plain format (no optim.num_groups) is one group with optim.weight_decay.
std::vector<double> Adam::load_group_decay(const Metadata& meta, double plain_decay) const {
  if (!meta.contains("optim.num_groups")) {
    DPLAB_CHECK(num_groups() == 1,
                "load_state_dict: this {} has {} parameter groups, the state dict has one (it "
                "has no optim.num_groups)",
                type_name(), num_groups());
    return {plain_decay};
  }
  const int64_t saved = detail::meta_int(meta, "optim.num_groups");
  DPLAB_CHECK(saved == static_cast<int64_t>(num_groups()),
              "load_state_dict: this {} has {} parameter groups, the state dict has {}",
              type_name(), num_groups(), saved);
  std::vector<double> decay(num_groups());
  for (size_t g = 0; g < num_groups(); ++g) {
    const int64_t n = detail::meta_int(meta, group_key(g, "num_params"));
    DPLAB_CHECK(n == static_cast<int64_t>(group_sizes_[g]),
                "load_state_dict: group {} of this {} has {} parameters, the state dict's has {}",
                g, type_name(), group_sizes_[g], n);
    decay[g] = detail::meta_double(meta, group_key(g, "weight_decay"));
    detail::check_non_negative(type_name(), group_key(g, "weight_decay").c_str(), decay[g]);
  }
  return decay;
}

void Adam::load_state_dict(const StateDict& tensors, const Metadata& meta) {
  detail::check_header(meta, type_name(), params_.size());
  AdamOptions o{
      .lr = detail::meta_double(meta, "optim.lr"),
      .betas = {detail::meta_double(meta, "optim.beta1"), detail::meta_double(meta, "optim.beta2")},
      .eps = detail::meta_double(meta, "optim.eps"),
      .weight_decay = detail::meta_double(meta, "optim.weight_decay")};
  check_options(type_name(), o);
  const std::vector<double> decay = load_group_decay(meta, o.weight_decay);
  // Build everything first, then commit: a bad entry leaves the optimizer untouched.
  std::vector<Tensor> m(params_.size()), v(params_.size());
  std::vector<int64_t> steps(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    std::string step_key = detail::state_key(i, "step");
    if (!meta.contains(step_key)) continue;  // this parameter never stepped
    steps[i] = detail::meta_int(meta, step_key);
    DPLAB_CHECK(steps[i] >= 1, "load_state_dict: \"{}\" should be >= 1, got {}", step_key,
                steps[i]);
    m[i] = detail::load_state_tensor(tensors, detail::state_key(i, "exp_avg"), params_[i]);
    const std::string v_key = detail::state_key(i, "exp_avg_sq");
    v[i] = detail::load_state_tensor(tensors, v_key, params_[i]);
    // v is an average of squares: a negative one would make the step's sqrt(v) NaN
    const std::vector<float> v_values = v[i].to(Device("cpu")).to_vector<float>();
    for (size_t j = 0; j < v_values.size(); ++j)
      DPLAB_CHECK(v_values[j] >= 0.0f,
                  "load_state_dict: \"{}\" holds {} at element {}: an average of squared "
                  "gradients is never negative",
                  v_key, v_values[j], j);
  }
  options_ = o;
  group_decay_ = decay;
  lr_ = o.lr;
  exp_avg_ = std::move(m);
  exp_avg_sq_ = std::move(v);
  steps_ = std::move(steps);
}

}  // namespace dplab::optim
