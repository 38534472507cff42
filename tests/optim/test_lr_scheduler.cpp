// test_lr_scheduler.cpp: StepLR and CosineAnnealingLR values epoch by epoch, and that they
// reach the optimizer.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "tests/optim/optim_test_util.h"

using namespace dplab;
using namespace dplab::optim_test;

TEST_CASE("StepLR: lr = base * gamma^(epoch / step_size)") {
  Tensor p = param({1});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR sched(opt, {.step_size = 2, .gamma = 0.1});
  // epochs 0..5: 1, 1, 0.1, 0.1, 0.01, 0.01
  const std::vector<double> expected = {1, 1, 0.1, 0.1, 0.01, 0.01};
  for (size_t e = 0; e < expected.size(); ++e) {
    INFO("epoch " << e);
    CHECK(sched.last_epoch() == static_cast<int64_t>(e));
    CHECK(sched.get_last_lr() == doctest::Approx(expected[e]).epsilon(1e-12));
    CHECK(opt.lr() == doctest::Approx(expected[e]).epsilon(1e-12));
    sched.step();
  }
}

TEST_CASE("CosineAnnealingLR: eta_min + (base - eta_min)(1 + cos(pi e / t_max)) / 2") {
  Tensor p = param({1});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::CosineAnnealingLR sched(opt, {.t_max = 4, .eta_min = 0.1});
  // e=0: 1;  e=1: 0.1 + 0.45*(1 + 0.7071068) = 0.8681981;  e=2: 0.1 + 0.45 = 0.55
  // e=3: 0.1 + 0.45*(1 - 0.7071068) = 0.2318019;           e=4: 0.1 (the minimum)
  // e=5: past t_max the cosine climbs back: same as e=3
  const std::vector<double> expected = {1.0, 0.8681981, 0.55, 0.2318019, 0.1, 0.2318019};
  for (size_t e = 0; e < expected.size(); ++e) {
    INFO("epoch " << e);
    CHECK(sched.get_last_lr() == doctest::Approx(expected[e]).epsilon(1e-6));
    CHECK(opt.lr() == sched.get_last_lr());
    sched.step();
  }
}

TEST_CASE("schedulers resume with set_last_epoch and reject bad options") {
  Tensor p = param({1});
  optim::SGD opt({p}, {.lr = 0.5});
  optim::StepLR sched(opt, {.step_size = 3, .gamma = 0.5});
  sched.set_last_epoch(7);  // 7 / 3 = 2 decays
  CHECK(opt.lr() == doctest::Approx(0.125));
  CHECK(sched.base_lr() == 0.5);
  CHECK_THROWS_WITH_AS(optim::StepLR(opt, {.step_size = 0}),
                       doctest::Contains("step_size must be > 0"), Error);
  CHECK_THROWS_WITH_AS(optim::CosineAnnealingLR(opt, {.t_max = 0}),
                       doctest::Contains("t_max must be > 0"), Error);
}

TEST_CASE("a scheduled lr is the one the next step uses") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR sched(opt, {.step_size = 1, .gamma = 0.1});
  sched.step();  // lr 0.1
  set_grad(p, kGrads[0]);
  opt.step();
  check_close(p, {0.95f, -2.1f});  // [1 - 0.1*0.5, -2 - 0.1*1]
}

TEST_CASE("WarmupCosineLR: linear warm-up from base/warmup, cosine to min_lr, then flat") {
  Tensor p = param({1});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::WarmupCosineLR sched(opt, {.warmup_steps = 4, .total_steps = 12, .min_lr = 0.1});
  // s=0..3: (s + 1) / 4 = 0.25, 0.5, 0.75, 1
  // s=4..12: 0.1 + 0.45 (1 + cos(pi (s - 4) / 8)); s=6: 0.1 + 0.45 (1 + cos(pi/4)) = 0.8681981
  //          s=8: 0.55 (half way); s=10: 0.2318019; s=12: 0.1; s>12: 0.1
  auto closed_form = [](int64_t s) {
    if (s < 4) return (s + 1) / 4.0;
    if (s > 12) return 0.1;
    return 0.1 + 0.45 * (1.0 + std::cos(std::numbers::pi * static_cast<double>(s - 4) / 8.0));
  };
  const std::vector<std::pair<int64_t, double>> by_hand = {
      {0, 0.25}, {1, 0.5},        {3, 1.0},  {4, 1.0},  {6, 0.8681981},
      {8, 0.55}, {10, 0.2318019}, {12, 0.1}, {13, 0.1}, {100, 0.1}};
  for (int64_t s = 0; s <= 20; ++s) {
    INFO("step " << s);
    CHECK(sched.last_epoch() == s);
    CHECK(opt.lr() == doctest::Approx(closed_form(s)).epsilon(1e-12));
    sched.step();
  }
  for (const auto& [s, lr] : by_hand) {
    INFO("step " << s);
    sched.set_last_epoch(s);
    CHECK(opt.lr() == doctest::Approx(lr).epsilon(1e-6));
  }
}

TEST_CASE("WarmupCosineLR without warm-up is the cosine alone; bad options throw") {
  Tensor p = param({1});
  optim::SGD opt({p}, {.lr = 2.0});
  optim::WarmupCosineLR sched(opt, {.warmup_steps = 0, .total_steps = 2});
  CHECK(opt.lr() == 2.0);
  sched.step();
  CHECK(opt.lr() == doctest::Approx(1.0));
  sched.step();
  CHECK(opt.lr() == doctest::Approx(0.0));
  CHECK_THROWS_WITH_AS(optim::WarmupCosineLR(opt, {.warmup_steps = 5, .total_steps = 5}),
                       doctest::Contains("total_steps must be > warmup_steps"), Error);
  CHECK_THROWS_WITH_AS(optim::WarmupCosineLR(opt, {.warmup_steps = -1, .total_steps = 5}),
                       doctest::Contains("warmup_steps must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(optim::WarmupCosineLR(opt, {.total_steps = 5, .min_lr = -0.1}),
                       doctest::Contains("min_lr must be >= 0"), Error);
}
