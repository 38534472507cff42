// gradcheck.h: compare autograd's gradient with central finite differences.
// The output is reduced to a scalar with fixed random weights, L = sum(w * f(x)), so every
// output element takes part. Float32 finite differences are noisy, so the step is 1e-2 and
// the tolerance is relative: |analytic - numeric| <= atol + rtol * |numeric|, which still
// catches a wrong formula (a missing factor of 2, a wrong sign, a transposed index).
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"

namespace dplab::testing {

struct GradcheckOptions {
  float eps = 1e-2f;
  float atol = 1e-2f;
  float rtol = 2e-2f;
};

// inputs must be cpu float32 leaves; those with requires_grad are checked.
inline void gradcheck(const std::string& what,
                      const std::function<Tensor(const std::vector<Tensor>&)>& f,
                      std::vector<Tensor> inputs, GradcheckOptions opt = {}) {
  Generator gen(1234);
  Tensor out = f(inputs);
  Tensor w = randn(out.shape(), {}, &gen);
  auto loss_of = [&](const std::vector<Tensor>& in) { return sum(mul(f(in), w)); };

  for (auto& x : inputs)
    if (x.requires_grad()) x.set_grad({});
  loss_of(inputs).backward();

  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    REQUIRE_MESSAGE(x.grad().defined(), what << ": input " << k << " got no gradient");
    std::vector<float> analytic = x.grad().to_vector<float>();
    float* data = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      NoGradGuard no_grad;
      float saved = data[i];
      data[i] = saved + opt.eps;
      double up = loss_of(inputs).item();
      data[i] = saved - opt.eps;
      double down = loss_of(inputs).item();
      data[i] = saved;
      double numeric = (up - down) / (2.0 * opt.eps);
      double err = std::abs(analytic[i] - numeric);
      CHECK_MESSAGE(err <= opt.atol + opt.rtol * std::abs(numeric),
                    what << ": d/dinput" << k << "[" << i << "] analytic " << analytic[i]
                         << " vs numeric " << numeric);
    }
  }
}

// A leaf with values from N(0, 1) * scale + shift, seeded.
inline Tensor leaf(const Shape& s, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  Generator g(seed);
  Tensor t = add_scalar(mul_scalar(randn(s, {}, &g), scale), shift);
  t = t.detach();
  t.requires_grad_(true);
  return t;
}

}  // namespace dplab::testing
