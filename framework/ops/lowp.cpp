// lowp.cpp: the cast op and the 16-bit helpers ops share (lowp.h).
#include "framework/ops/lowp.h"

#include "framework/autograd/checkpoint.h"
#include "framework/ops/autocast.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {

Tensor raw_cast(const Tensor& t, DType to) {
  if (t.dtype() == to) return t;
  Tensor out = Tensor::empty(t.shape(), {.dtype = to, .device = t.device()});
  backend_of(t).cast(t.dtype(), t.raw_data(), to, out.raw_data(), t.numel());
  return out;
}

// d cast(x)/dx = 1: the gradient comes back cast to x's dtype (record() does that for
// every op, so the closure only passes it on). Casts to or from int64 are not differentiable.
Tensor cast(const Tensor& a, DType t) {
  check_defined("cast", a);
  if (a.dtype() == t) return a;
  Tensor out = raw_cast(a, t);
  if (!is_floating(t) || !is_floating(a.dtype())) return out;
  return record(out, "ToCopyBackward", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

std::optional<DType> lowp_result_dtype(const std::vector<Tensor>& inputs) {
  bool any = false;
  std::optional<DType> result;
  for (const Tensor& t : inputs) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    any = any || is_low_precision(t.dtype());
    result = result ? promote_types(*result, t.dtype()) : t.dtype();
  }
  return any ? result : std::nullopt;
}

bool needs_float32(const std::vector<Tensor>& inputs) {
  return amp::autocast_dtype() || lowp_result_dtype(inputs).has_value();
}

DType float32_op_result(const std::vector<Tensor>& inputs) {
  if (amp::autocast_dtype()) return DType::Float32;
  return lowp_result_dtype(inputs).value_or(DType::Float32);
}

Tensor conv2d_lowp(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                   int64_t padding, DType out_dtype) {
  auto conv_in_float32 = [stride, padding, out_dtype](const std::vector<Tensor>& in) {
    amp::AutocastSuspend inside;  // the recompute in backward must not autocast again
    Tensor b = in.size() > 2 ? amp::to_float32(in[2]) : Tensor();
    return cast(conv2d(amp::to_float32(in[0]), amp::to_float32(in[1]), b, stride, padding),
                out_dtype);
  };
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!grad_enabled() || !any_requires_grad(inputs))
    return conv_in_float32(inputs);  // nothing to save
  return checkpoint(conv_in_float32, inputs, /*preserve_rng_state=*/false);
}

}  // namespace dplab
