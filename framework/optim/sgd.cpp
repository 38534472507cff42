// sgd.cpp: SGD's step is a loop over parameters, one fused kernel each on the parameter's
// device; the arithmetic (torch.optim.SGD's) lives in the backends' sgd_step:
//   g = grad + wd * p;  buf = first ? g : momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf;  p -= lr * g
// Read next: adam.cpp.
#include "framework/optim/sgd.h"

#include "framework/backend/backend.h"
#include "framework/optim/optim_state.h"

namespace dplab::optim {
namespace {

void check_options(const SGDOptions& o) {
  detail::check_non_negative("SGD", "lr", o.lr);
  detail::check_non_negative("SGD", "momentum", o.momentum);
  detail::check_non_negative("SGD", "weight_decay", o.weight_decay);
  DPLAB_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
              "SGD: nesterov momentum requires a momentum > 0 and zero dampening, got momentum {} "
              "and dampening {}",
              o.momentum, o.dampening);
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params)), options_(options), momentum_buffers_(params_.size()) {
  check_options(options_);
  lr_ = options_.lr;
}

void SGD::step() {
  DPLAB_CHECK(lr_ >= 0.0, "SGD: invalid lr: expected >= 0, got {} (set by set_lr?)", lr_);
  const bool use_momentum = options_.momentum != 0.0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = detail::checked_grad("SGD", params_, i);
    if (!grad.defined()) continue;  // no gradient this step: PyTorch skips the parameter
    Tensor& p = params_[i];
    SgdArgs args{.lr = static_cast<float>(lr_),
                 .momentum = static_cast<float>(options_.momentum),
                 .dampening = static_cast<float>(options_.dampening),
                 .weight_decay = static_cast<float>(options_.weight_decay),
                 .nesterov = options_.nesterov,
                 .first_step = false};
    float* buf = nullptr;
    if (use_momentum) {
      if (!momentum_buffers_[i].defined()) {
        // The kernel overwrites the buffer with the gradient on the first step, so it need
        // not be zeroed; zeros keep it deterministic if a step is ever interrupted.
        momentum_buffers_[i] = detail::zeros_like_param(p);
        args.first_step = true;
      }
      buf = momentum_buffers_[i].data<float>();
    }
    backend_for(p.device()).sgd_step(args, p.data<float>(), grad.data<float>(), buf, p.numel());
  }
}

void SGD::state_dict(StateDict& tensors, Metadata& meta) const {
  meta["optim.type"] = "SGD";
  meta["optim.num_params"] = std::to_string(params_.size());
  meta["optim.lr"] = detail::format_double(lr_);
  meta["optim.momentum"] = detail::format_double(options_.momentum);
  meta["optim.dampening"] = detail::format_double(options_.dampening);
  meta["optim.weight_decay"] = detail::format_double(options_.weight_decay);
  meta["optim.nesterov"] =
      std::string(options_.nesterov ? "1" : "0");  // (a char* ternary trips GCC 12's -Wrestrict)
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined())
      tensors.insert(detail::state_key(i, "momentum_buffer"), momentum_buffers_[i]);
}

void SGD::load_state_dict(const StateDict& tensors, const Metadata& meta) {
  detail::check_header(meta, "SGD", params_.size());
  SGDOptions o{.lr = detail::meta_double(meta, "optim.lr"),
               .momentum = detail::meta_double(meta, "optim.momentum"),
               .dampening = detail::meta_double(meta, "optim.dampening"),
               .weight_decay = detail::meta_double(meta, "optim.weight_decay"),
               .nesterov = detail::meta_int(meta, "optim.nesterov") != 0};
  check_options(o);
  // Build everything first, then commit: a bad entry leaves the optimizer untouched.
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    std::string key = detail::state_key(i, "momentum_buffer");
    if (tensors.contains(key)) buffers[i] = detail::load_state_tensor(tensors, key, params_[i]);
  }
  options_ = o;
  lr_ = o.lr;
  momentum_buffers_ = std::move(buffers);
}

}  // namespace dplab::optim
