// grading.h: how hw1 is checked. Each backward is compared with dplab's own autograd on the
// same forward (L = sum(y * gy), so every output takes part), element by element with
// |got - want| <= atol + rtol * |want|, and on small inputs also with central finite
// differences of the forward. A wrong gradient is explained by shape, by its worst element,
// and by the ratio to the right value when it is off by a constant factor.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hw1.h"
#include "framework/autograd/grad_mode.h"
#include "framework/tensor/random.h"

namespace hw1::grading {

using namespace dplab;
using Forward = std::function<Tensor(const std::vector<Tensor>&)>;

// The inputs are drawn afresh in each grade: a test's seed is its own number plus one drawn
// when the judge starts (std::random_device), so gradients written down for one grade's
// inputs are wrong in the next, while a test stays reproducible within its run.
inline uint64_t grade_seed() {
  static const uint64_t seed = [] {
    std::random_device device;
    return (uint64_t{device()} << 32) | device();
  }();
  return seed;
}
inline void seed_inputs(uint64_t test) { manual_seed(grade_seed() + test); }

inline std::string shape_of(const Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape()[i]);
  return s + "]";
}

inline std::string index_of(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string s = "[";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + "]";
}

// "" when `got` matches `want`; else what is wrong with `name`, in a sentence.
inline std::string compare(const std::string& name, const std::string& input, const Tensor& got,
                           const Tensor& want, float atol = 1e-4f, float rtol = 1e-3f) {
  if (!got.defined()) return fmt::format("{} is not defined (return a tensor shaped like {})", name, input);
  if (got.shape() != want.shape())
    return fmt::format("{} has shape {}, but {} is {}: the gradient of an input has the input's shape",
                       name, shape_of(got), input, shape_of(want));
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  int64_t worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double excess = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
    if (!(excess <= 0) && (worst < 0 || !(excess <= worst_excess))) {
      worst = static_cast<int64_t>(i);
      worst_excess = excess;
    }
  }
  if (worst < 0) return "";
  std::string why = fmt::format("{}{} = {:.6g}, but the right value is {:.6g}", name,
                                index_of(want.shape(), worst), g[worst], w[worst]);
  // the same factor everywhere? (a missing 1/B, a doubled term, a flipped sign). A ratio of
  // 1 is no factor: then only some elements are wrong, and the worst one is named above.
  double ratio = 0;
  bool constant = true;
  int64_t compared = 0;
  for (size_t i = 0; i < g.size() && constant; ++i) {
    if (std::abs(w[i]) < 1e-3) continue;
    const double r = g[i] / w[i];
    if (ratio == 0) ratio = r;
    constant = std::abs(r - ratio) < 1e-3 * std::abs(ratio);
    ++compared;
  }
  if (constant && compared > 1 && std::abs(ratio + 1) < 1e-3)
    why += " (every element has the wrong sign)";
  else if (constant && compared > 1 && ratio != 0 && std::abs(ratio - 1) > 1e-3)
    why += fmt::format(" (every element is off by the same factor {:.4g}: a missing or extra scale?)", ratio);
  return why;
}

// dplab's autograd gradients of L = sum(forward(inputs) * gy) for every input.
inline std::vector<Tensor> autograd(const Forward& forward, std::vector<Tensor> inputs, const Tensor& gy) {
  for (Tensor& x : inputs) x = clone(x).requires_grad_();
  sum(mul(forward(inputs), gy)).backward();
  std::vector<Tensor> grads;
  for (const Tensor& x : inputs) grads.push_back(x.grad());
  return grads;
}

// Central finite differences of L = sum(forward(inputs) * gy) for input k, in double
// precision sums over float forwards (step 1e-2: float32 noise stays below the tolerance).
inline Tensor finite_differences(const Forward& forward, const std::vector<Tensor>& inputs, size_t k,
                                 const Tensor& gy) {
  NoGradGuard no_grad;
  auto loss = [&](const std::vector<Tensor>& in) {
    const std::vector<float> y = forward(in).to_vector<float>(), g = gy.to_vector<float>();
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * g[i];
    return l;
  };
  Tensor grad = zeros(inputs[k].shape());
  const float eps = 1e-2f;
  for (int64_t i = 0; i < inputs[k].numel(); ++i) {
    std::vector<Tensor> in = inputs;
    in[k] = clone(inputs[k]);
    float* p = in[k].data<float>();
    const float x = p[i];
    p[i] = x + eps;
    const double up = loss(in);
    p[i] = x - eps;
    const double down = loss(in);
    grad.data<float>()[i] = static_cast<float>((up - down) / (2 * eps));
  }
  return grad;
}

// The student's side: given gy = dL/dy, the gradients of every input.
using Student = std::function<std::vector<Tensor>(const Tensor& gy)>;

// Draws gy, runs the student's backward with it, and CHECKs each gradient against autograd
// and, if `numeric`, against finite differences.
inline void check(const std::string& what, const Forward& forward, const std::vector<Tensor>& inputs,
                  const std::vector<std::string>& names, const std::vector<std::string>& input_names,
                  const Student& student, bool numeric = false) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = forward(inputs);
  }
  Generator gen(grade_seed() + 7);
  const Tensor gy = randn(y.shape(), {}, &gen);  // stands for dL/dy
  std::vector<Tensor> got;
  {
    NoGradGuard no_grad;  // the student's backward runs without autograd recording anything
    got = student(gy);
  }
  const std::vector<Tensor> want = autograd(forward, inputs, gy);
  for (size_t k = 0; k < got.size(); ++k) {
    const std::string why = compare(names[k], input_names[k], got[k], want[k]);
    CHECK_MESSAGE(why.empty(), what << ": " << why);
    if (numeric && why.empty()) {
      const std::string fd = compare(names[k], input_names[k], got[k],
                                     finite_differences(forward, inputs, k, gy), 2e-2f, 2e-2f);
      CHECK_MESSAGE(fd.empty(), what << " (against finite differences): " << fd);
    }
  }
}

}  // namespace hw1::grading
