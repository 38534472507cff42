// optim_test_util.h: helpers for the optimizer tests: a parameter with given values, a
// fixed gradient per step, and an element-wise comparison with a tolerance.
#pragma once
#include <doctest/doctest.h>

#include <vector>

#include "framework/ops/ops.h"
#include "framework/optim/optimizer.h"

namespace dplab::optim_test {

inline Tensor param(const std::vector<float>& v, Device d = Device("cpu")) {
  Tensor p = from_vector(v, {static_cast<int64_t>(v.size())}, {.device = d});
  p.requires_grad_(true);
  return p;
}

inline void set_grad(Tensor& p, const std::vector<float>& g) {
  p.set_grad(from_vector(g, p.shape(), {.device = p.device()}));
}

inline void check_close(const Tensor& t, const std::vector<float>& expected, double tol = 1e-5) {
  std::vector<float> got = t.to_vector<float>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << expected[i]);
    CHECK(std::abs(got[i] - expected[i]) <= tol);
  }
}

// The gradients used by every hand-computed test: g1, g2, g3.
inline const std::vector<std::vector<float>> kGrads = {{0.5f, 1.0f}, {-1.0f, 2.0f}, {2.0f, 0.0f}};

// Runs one step per expected[k] with gradient kGrads[k], checking p after each.
inline void run_steps(optim::Optimizer& opt, Tensor& p,
                      const std::vector<std::vector<float>>& expected) {
  for (size_t k = 0; k < expected.size(); ++k) {
    set_grad(p, kGrads[k]);
    opt.step();
    INFO("after step " << k + 1);
    check_close(p, expected[k]);
  }
}

}  // namespace dplab::optim_test
