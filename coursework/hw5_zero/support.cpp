// support.cpp: the part of hw5 that is given: flattening the parameters and their gradients.
#include "zero.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace hw5 {

using namespace dplab;

namespace {

Tensor flatten(const std::vector<Tensor>& params, int64_t padded, bool grads) {
  NoGradGuard no_grad;
  Tensor flat = zeros({padded});
  int64_t offset = 0;
  for (const Tensor& p : params) {
    const Tensor& src = grads ? p.grad() : p;
    if (src.defined()) flat.narrow(offset, p.numel()).copy_(reshape(src, {p.numel()}));
    offset += p.numel();
  }
  return flat;
}

}  // namespace

Tensor flatten_grads(const std::vector<Tensor>& params, int64_t padded) { return flatten(params, padded, true); }
Tensor flatten_values(const std::vector<Tensor>& params, int64_t padded) { return flatten(params, padded, false); }

void unflatten_values(const Tensor& flat, const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (Tensor p : params) {
    p.copy_(reshape(flat.narrow(offset, p.numel()), p.shape()));
    offset += p.numel();
  }
}

}  // namespace hw5
