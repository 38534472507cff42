// master_weights.cpp: Apex O2's model cast and float32 master weights (master_weights.h).
#include "framework/amp/master_weights.h"

#include "framework/amp/grad_scaler.h"

#include "framework/autograd/grad_mode.h"
#include "framework/error.h"
#include "framework/ops/ops.h"

namespace dplab::amp {
namespace {

// Rebinds t's storage to a copy in dtype, in place, as Module::to(Device) does for devices.
void cast_in_place(Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return;
  TensorImpl& impl = t.impl();
  Tensor converted = t.detach().to(dtype);
  impl.storage = converted.impl().storage;
  impl.offset = converted.impl().offset;
  impl.dtype = dtype;
  if (impl.grad) impl.grad = Tensor(impl.grad).detach().to(dtype).impl_ptr();
}

std::vector<Tensor> float32_copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> masters;
  for (const Tensor& p : params) {
    DPLAB_CHECK(p.defined() && is_floating(p.dtype()),
                "MasterWeightOptimizer: expected floating "
                "parameters, got {}",
                p.defined() ? std::string(dtype_name(p.dtype())) : "an undefined tensor");
    Tensor m = p.dtype() == DType::Float32 ? p.detach().clone() : p.detach().to(DType::Float32);
    m.requires_grad_(true);
    masters.push_back(m);
  }
  return masters;
}

}  // namespace

void cast_module_(nn::Module& module, DType dtype, bool keep_batchnorm_fp32) {
  DPLAB_CHECK(is_floating(dtype), "cast_module_: expected a floating dtype, got {}",
              dtype_name(dtype));
  for (auto& [name, m] : module.named_modules()) {
    if (keep_batchnorm_fp32 && m->name().find("BatchNorm") != std::string::npos) continue;
    for (auto& [pname, p] : m->own_parameters()) cast_in_place(p, dtype);
  }
}

MasterWeightOptimizer::MasterWeightOptimizer(std::vector<Tensor> model_params,
                                             const InnerOptimizerFactory& make_inner)
    : Optimizer(float32_copies(model_params)), model_params_(std::move(model_params)) {
  inner_ = make_inner(params_);
  DPLAB_CHECK(inner_ != nullptr, "MasterWeightOptimizer: the factory returned no optimizer");
  lr_ = inner_->lr();
}

void MasterWeightOptimizer::sync_grads() {
  if (synced_) return;
  synced_ = true;
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_params_.size(); ++i) {
    Tensor g = model_params_[i].grad();
    params_[i].set_grad(g.defined() ? g.detach().to(DType::Float32).detach().clone() : Tensor());
  }
}

void MasterWeightOptimizer::step() {
  sync_grads();
  inner_->set_lr(lr_);  // schedulers set this optimizer's lr
  inner_->step();
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_params_.size(); ++i) {
    model_params_[i].detach().copy_(params_[i].detach().to(model_params_[i].dtype()));
    params_[i].set_grad(Tensor());  // 4 bytes per parameter, needed again only next step
  }
  synced_ = false;
}

void MasterWeightOptimizer::zero_grad(bool set_to_none) {
  Optimizer::zero_grad(set_to_none);
  for (Tensor& p : model_params_) {
    if (set_to_none) p.set_grad(Tensor());
    else if (Tensor g = p.grad(); g.defined()) g.zero_();
  }
  synced_ = false;
}

void MasterWeightOptimizer::state_dict(StateDict& tensors, Metadata& meta) const {
  inner_->state_dict(tensors, meta);
  for (size_t i = 0; i < params_.size(); ++i)
    tensors.insert(fmt::format("master.{}", i), params_[i].detach());
}

void MasterWeightOptimizer::load_state_dict(const StateDict& tensors, const Metadata& meta) {
  // All or nothing: the masters are checked before the inner optimizer loads (which checks
  // its own state before it commits), and copied only after.
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string key = fmt::format("master.{}", i);
    DPLAB_CHECK(tensors.contains(key), "MasterWeightOptimizer::load_state_dict: missing {}", key);
    const Tensor& master = tensors.at(key);
    DPLAB_CHECK(master.dtype() == DType::Float32 && master.shape() == params_[i].shape(),
                "MasterWeightOptimizer::load_state_dict: \"{}\" should be float32 {}, got {} {}",
                key, shape_str(params_[i].shape()), dtype_name(master.dtype()),
                shape_str(master.shape()));
    DPLAB_CHECK(all_finite(master),
                "MasterWeightOptimizer::load_state_dict: \"{}\" holds a NaN or an infinity: "
                "master weights must be finite",
                key);
  }
  inner_->load_state_dict(tensors, meta);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].detach().copy_(tensors.at(fmt::format("master.{}", i)).to(params_[i].device()));
    model_params_[i].detach().copy_(params_[i].detach().to(model_params_[i].dtype()));
  }
}

}  // namespace dplab::amp
