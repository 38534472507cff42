// autocast.h: torch.autocast for dplab (amp::AutocastGuard), kept with the ops it steers: each
// op reads the state at its entry. Inside an AutocastGuard(dtype), the ops that gain
// from 16-bit math run in `dtype` and the ones that lose accuracy run in float32, whatever
// dtype their inputs have; outside it nothing changes. The lists are PyTorch's:
//   low precision (cast float32 inputs to dtype): matmul, linear, conv2d
//   float32 (cast 16-bit inputs up): softmax, log_softmax, causal_softmax, nll_loss,
//     cross_entropy, mse_loss, batch_norm, layer_norm, sum, mean, var, exp, log, pow
//   everything else (relu, gelu, add, pooling, embedding, reshape, ...) runs in the dtype it
//   is given; a binary op on two dtypes promotes (float16 + float32 -> float32), as PyTorch
//   does.
// Why these lists: a GEMM sums K products, and float32 accumulation keeps that sum accurate
// while 16-bit inputs halve the bytes read (and run on tensor cores); exp, log, softmax and
// the losses are where 10 mantissa bits lose real information (exp(11) overflows float16).
// The casts are ordinary differentiable ops, so gradients come back in each input's dtype.
// The state is thread-local, like grad mode. Backward is not affected by autocast.
// Read next: amp/grad_scaler.h (why float16 needs loss scaling), lowp.h.
#pragma once
#include <optional>

#include "framework/tensor/tensor.h"

namespace dplab::amp {

// The 16-bit dtype autocast runs its low-precision ops in, or nullopt outside a guard.
std::optional<DType> autocast_dtype();

class AutocastGuard {
 public:
  // dtype must be Float16 or BFloat16; enabled = false switches autocast off inside
  // (torch.autocast(enabled=False), to run a region in float32).
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> prev_;
};

// ---- what ops call at their entry ----
// Inside an op that autocast has already cast for, nested ops must not cast again.
class AutocastSuspend {
 public:
  AutocastSuspend();
  ~AutocastSuspend();
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  std::optional<DType> prev_;
};
// t cast to the autocast dtype when it is a floating tensor of another dtype (else t).
Tensor to_autocast_dtype(const Tensor& t);
// t cast to float32 when it is 16-bit (else t).
Tensor to_float32(const Tensor& t);

}  // namespace dplab::amp
