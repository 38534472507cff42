// test_adam.cpp: Adam and AdamW against updates computed by hand on p0 = [1, -2] with
// g1 = [0.5, 1], g2 = [-1, 2], g3 = [2, 0], lr 0.1, betas (0.9, 0.999), eps 1e-8;
// errors, skipped parameters, and state memory on the parameter's device.
#include <doctest/doctest.h>

#include "framework/optim/adam.h"
#include "framework/tensor/allocator.h"
#include "tests/optim/optim_test_util.h"

using namespace dplab;
using namespace dplab::optim_test;

TEST_CASE("Adam: bias-corrected m / sqrt(v)") {
  Tensor p = param({1, -2});
  optim::Adam opt({p}, {.lr = 0.1, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0});
  // s1: m = 0.1*g1 = [0.05, 0.1], v = 0.001*g1^2 = [0.00025, 0.001]
  //     m/(1-0.9) = [0.5, 1], v/(1-0.999) = [0.25, 1]: the step is lr * sign(g) = 0.1 each
  //     p = [0.9, -2.1]
  // s2: m = 0.9*[0.05, 0.1] + 0.1*[-1, 2] = [-0.055, 0.29]
  //     v = 0.999*[0.00025, 0.001] + 0.001*[1, 4] = [0.00124975, 0.004999]
  //     bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.998001 = 0.001999
  //     step = 0.1 * (m/0.19) / sqrt(v/0.001999) = 0.1 * [-0.289474, 1.526316] / [0.790688, 1.581376]
  //          = [-0.0366104, 0.0965182]         p = [0.9366104, -2.1965182]
  // s3: m = [0.1505, 0.261], v = [0.0052485, 0.004994001], bc1 = 0.271, bc2 = 0.002997001
  //     p = [0.8946448, -2.2711271]
  run_steps(opt, p, {{0.9f, -2.1f}, {0.9366104f, -2.1965182f}, {0.8946448f, -2.2711271f}});
  CHECK(opt.step_count(0) == 3);
}

TEST_CASE("Adam weight decay 0.1 is L2: g += 0.1 p before the moments") {
  Tensor p = param({1, -2});
  optim::Adam opt({p}, {.lr = 0.1, .weight_decay = 0.1});
  // s1: g = [0.5 + 0.1, 1 - 0.2] = [0.6, 0.8]: again a step of 0.1 * sign   p = [0.9, -2.1]
  // s2: g = [-1 + 0.09, 2 - 0.21] = [-0.91, 1.79]; m = [-0.037, 0.251],
  //     v = [0.00118774, 0.00384346]                                        p = [0.9252635, -2.1952720]
  run_steps(opt, p, {{0.9f, -2.1f}, {0.9252635f, -2.1952720f}});
}

TEST_CASE("AdamW decouples weight decay: p *= 1 - lr*wd, then the Adam step of g alone") {
  Tensor p = param({1, -2});
  optim::AdamW opt({p}, {.lr = 0.1, .weight_decay = 0.1});
  // s1: p = [1, -2] * 0.99 = [0.99, -1.98], minus 0.1*sign(g1)   p = [0.89, -2.08]
  // s2: p = [0.89, -2.08] * 0.99 = [0.8811, -2.0592]; the moments see only g (same as
  //     Adam's s2): step [-0.0366104, 0.0965182]                 p = [0.9177104, -2.1557182]
  // s3: p = [0.8665677, -2.2087699]
  run_steps(opt, p, {{0.89f, -2.08f}, {0.9177104f, -2.1557182f}, {0.8665677f, -2.2087699f}});
}

TEST_CASE("AdamW's default weight decay is 0.01, Adam's is 0") {
  Tensor p = param({1, -2});
  optim::AdamW w({p});
  optim::Adam a({p});
  StateDict sd;
  Metadata wm, am;
  w.state_dict(sd, wm);
  a.state_dict(sd, am);
  CHECK(wm.at("optim.type") == "AdamW");
  CHECK(std::stod(wm.at("optim.weight_decay")) == doctest::Approx(0.01));
  CHECK(am.at("optim.type") == "Adam");
  CHECK(std::stod(am.at("optim.weight_decay")) == 0.0);
  CHECK(a.lr() == doctest::Approx(1e-3));
}

TEST_CASE("Adam rejects bad options") {
  Tensor p = param({1, 2});
  CHECK_THROWS_WITH_AS(optim::Adam({p}, {.lr = -1}), doctest::Contains("invalid lr"), Error);
  CHECK_THROWS_WITH_AS(optim::Adam({p}, {.betas = {1.0, 0.999}}),
                       doctest::Contains("invalid beta1"), Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({p}, {.betas = {0.9, -0.1}}),
                       doctest::Contains("invalid beta2"), Error);
  CHECK_THROWS_WITH_AS(optim::Adam({p}, {.eps = -1e-8}), doctest::Contains("invalid eps"), Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({p}, {.weight_decay = -0.01}),
                       doctest::Contains("AdamW: invalid weight_decay"), Error);
  CHECK_THROWS_WITH_AS(optim::Adam({p * 2.0f}), doctest::Contains("not a leaf"), Error);
}

TEST_CASE("Adam skips parameters without a gradient, and their step count stays") {
  Tensor a = param({1, -2}), b = param({5, 6});
  optim::Adam opt({a, b}, {.lr = 0.1});
  set_grad(a, kGrads[0]);
  opt.step();
  set_grad(b, kGrads[0]);  // b joins at the second step: its first step is bias-corrected as t = 1
  opt.step();
  CHECK(opt.step_count(0) == 2);
  CHECK(opt.step_count(1) == 1);
  check_close(b, {4.9f, 5.9f});
}

TEST_CASE("Adam state (m and v) lives on the parameter's device") {
  Device dev("cpu:5");
  Tensor p = param(std::vector<float>(1000, 1.0f), dev);
  set_grad(p, std::vector<float>(1000, 0.5f));
  optim::Adam opt({p}, {.lr = 0.1});
  int64_t before = memory_stats(dev).allocated_bytes;
  opt.step();
  CHECK(memory_stats(dev).allocated_bytes - before == 2 * 1000 * 4);  // exp_avg + exp_avg_sq
  opt.step();
  CHECK(memory_stats(dev).allocated_bytes - before == 2 * 1000 * 4);
}
