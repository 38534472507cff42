// test_clip_grad.cpp: clip_grad_norm_ against norms worked out by hand, on gradients
// g_a = [3, 0], g_b = [[0, 4]] (total norm sqrt(9 + 16) = 5) and a parameter without one.
#include <doctest/doctest.h>

#include <cmath>

#include "framework/optim/clip_grad.h"
#include "tests/optim/optim_test_util.h"

using namespace dplab;
using namespace dplab::optim_test;

namespace {

struct ThreeParams {
  Tensor a = param({1, 1}), b = param({1, 1}, Device("cpu:1")), none = param({7});
  ThreeParams() {
    set_grad(a, {3, 0});
    set_grad(b, {0, 4});  // another device: the norm is global across devices
  }
  std::vector<Tensor> all() const { return {a, none, b}; }
};

}  // namespace

TEST_CASE("clip_grad_norm_ scales every gradient by max_norm / (total + 1e-6) when that is < 1") {
  ThreeParams t;
  const double total = optim::clip_grad_norm_(t.all(), 1.0);
  CHECK(total == doctest::Approx(5.0).epsilon(1e-7));  // returned before clipping
  const double scale = 1.0 / (5.0 + 1e-6);
  check_close(t.a.grad(), {static_cast<float>(3 * scale), 0.0f}, 1e-7);
  check_close(t.b.grad(), {0.0f, static_cast<float>(4 * scale)}, 1e-7);
  CHECK(!t.none.grad().defined());  // skipped, not created
  // the clipped norm is max_norm, a hair under it
  CHECK(optim::clip_grad_norm_(t.all(), 1.0) == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("clip_grad_norm_ leaves gradients under max_norm alone") {
  ThreeParams t;
  CHECK(optim::clip_grad_norm_(t.all(), 5.0) == doctest::Approx(5.0));  // scale 5/(5+1e-6) < 1
  check_close(t.a.grad(), {static_cast<float>(3 * 5.0 / (5.0 + 1e-6)), 0.0f}, 1e-6);  // 1 ulp
  ThreeParams u;
  CHECK(optim::clip_grad_norm_(u.all(), 10.0) == doctest::Approx(5.0));
  CHECK(u.a.grad().to_vector<float>() == std::vector<float>{3, 0});  // exactly unchanged
  CHECK(u.b.grad().to_vector<float>() == std::vector<float>{0, 4});
}

TEST_CASE("clip_grad_norm_ with no gradients is 0 and changes nothing; bad max_norm throws") {
  Tensor p = param({1, 2});
  CHECK(optim::clip_grad_norm_({p}, 1.0) == 0.0);
  CHECK(optim::clip_grad_norm_({}, 1.0) == 0.0);
  set_grad(p, {0, 0});
  CHECK(optim::clip_grad_norm_({p}, 1.0) == 0.0);  // 1 / (0 + 1e-6): no division by zero
  CHECK(p.grad().to_vector<float>() == std::vector<float>{0, 0});
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm_({p}, -1.0),
                       doctest::Contains("max_norm must be a finite value >= 0, got -1"), Error);
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm_({p}, std::nan("")),
                       doctest::Contains("max_norm must be a finite value"), Error);
}
