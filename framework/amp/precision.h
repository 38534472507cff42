// precision.h: the three ways dplab trains, as a flag (dplab-compare --precision, the
// tutorials), and one Apex-O1 training step that serves all three:
//   fp32: plain float32, no scaler
//   fp16: autocast(float16) forward + GradScaler (dynamic loss scaling)
//   bf16: autocast(bfloat16) forward, no scaler (bfloat16 has float32's range)
// Read next: ops/autocast.h, grad_scaler.h.
#pragma once
#include <optional>
#include <string>

#include "framework/amp/grad_scaler.h"
#include "framework/nn/module.h"

namespace dplab::amp {

enum class Precision { Fp32, Fp16, Bf16 };

Precision parse_precision(
    const std::string& name);  // "fp32", "fp16", "bf16"; else Error naming them
const char* precision_name(Precision p);
// The dtype the GEMMs run in (and gradients of 16-bit tensors have): Float32, Float16, BFloat16.
DType compute_dtype(Precision p);
// A scaler enabled for fp16 only (for fp32 and bf16 every call passes through).
GradScaler make_scaler(Precision p);

struct StepResult {
  Tensor logits;        // [N, classes], the dtype autocast gave (16-bit for fp16 / bf16)
  float loss = 0;       // the unscaled cross-entropy
  bool stepped = true;  // false when the scaler skipped the step (inf / NaN gradients)
};
// zero_grad; forward under autocast (fp16 / bf16); cross_entropy in float32; backward of
// the scaled loss; scaler.step (unscale, skip on overflow); scaler.update.
StepResult train_step(nn::Module& model, optim::Optimizer& optimizer, GradScaler& scaler,
                      const Tensor& x, const Tensor& y, Precision p);

}  // namespace dplab::amp
