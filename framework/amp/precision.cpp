// precision.cpp: see precision.h.
#include "framework/amp/precision.h"

#include "framework/error.h"
#include "framework/ops/autocast.h"
#include "framework/ops/ops.h"

namespace dplab::amp {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "fp16") return Precision::Fp16;
  if (name == "bf16") return Precision::Bf16;
  DPLAB_FAIL("precision: expected fp32, fp16 or bf16, got \"{}\"", name);
}

const char* precision_name(Precision p) {
  return p == Precision::Fp16 ? "fp16" : p == Precision::Bf16 ? "bf16" : "fp32";
}

DType compute_dtype(Precision p) {
  return p == Precision::Fp16   ? DType::Float16
         : p == Precision::Bf16 ? DType::BFloat16
                                : DType::Float32;
}

GradScaler make_scaler(Precision p) { return GradScaler({.enabled = p == Precision::Fp16}); }

StepResult train_step(nn::Module& model, optim::Optimizer& optimizer, GradScaler& scaler,
                      const Tensor& x, const Tensor& y, Precision p) {
  StepResult r;
  optimizer.zero_grad();
  Tensor loss;
  {
    AutocastGuard autocast(p == Precision::Fp32 ? DType::Float16 : compute_dtype(p),
                           p != Precision::Fp32);
    r.logits = model.forward(x);
    loss = cross_entropy(r.logits, y);  // float32 inside autocast
  }
  scaler.scale(loss).backward();
  r.stepped = scaler.step(optimizer);
  scaler.update();
  r.loss = loss.item();
  return r;
}

}  // namespace dplab::amp
