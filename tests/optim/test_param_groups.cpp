// test_param_groups.cpp: AdamW with a decayed and a not-decayed group. Both groups are
// checked against an AdamW written out in double in this file, and the decoupled decay is
// checked on its own: after one step the decayed copy differs from the other by exactly
// lr * wd * p0. decay_groups' split by rank, and the groups' state-dict round trip.
#include <doctest/doctest.h>

#include <cmath>

#include "framework/nn/layers.h"
#include "framework/optim/adam.h"
#include "framework/optim/param_groups.h"
#include "tests/optim/optim_test_util.h"

using namespace dplab;
using namespace dplab::optim_test;

namespace {

// torch.optim.AdamW's update for one parameter over kGrads, in double:
//   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
std::vector<std::vector<float>> reference_adamw(std::vector<double> p, double lr, double wd,
                                                size_t steps) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<double> m(p.size(), 0.0), v(p.size(), 0.0);
  std::vector<std::vector<float>> after;
  for (size_t t = 1; t <= steps; ++t) {
    const std::vector<float>& g = kGrads[t - 1];
    std::vector<float> row;
    for (size_t j = 0; j < p.size(); ++j) {
      p[j] *= 1.0 - lr * wd;
      m[j] = b1 * m[j] + (1 - b1) * g[j];
      v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
      const double m_hat = m[j] / (1 - std::pow(b1, t)), v_hat = v[j] / (1 - std::pow(b2, t));
      p[j] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      row.push_back(static_cast<float>(p[j]));
    }
    after.push_back(row);
  }
  return after;
}

}  // namespace

TEST_CASE("AdamW groups: the no-decay group takes Adam's step, the decay group also shrinks") {
  Tensor decayed = param({1, -2}), plain = param({1, -2});
  optim::AdamW opt({{.params = {decayed}}, {.params = {plain}, .weight_decay = 0.0}},
                   {.lr = 0.1, .weight_decay = 0.1});
  CHECK(opt.num_groups() == 2);
  CHECK(opt.group_weight_decay(0) == 0.1);  // unset: the options' decay
  CHECK(opt.group_weight_decay(1) == 0.0);
  const auto want_decayed = reference_adamw({1, -2}, 0.1, 0.1, 3);
  const auto want_plain = reference_adamw({1, -2}, 0.1, 0.0, 3);
  for (size_t k = 0; k < 3; ++k) {
    set_grad(decayed, kGrads[k]);
    set_grad(plain, kGrads[k]);
    opt.step();
    INFO("after step " << k + 1);
    check_close(decayed, want_decayed[k]);
    check_close(plain, want_plain[k]);
    if (k == 0) {
      // Same gradient, same moments: the only difference is the decay, p0 * lr * wd.
      const std::vector<float> d = decayed.to_vector<float>(), n = plain.to_vector<float>();
      CHECK(n[0] - d[0] == doctest::Approx(1.0 * 0.1 * 0.1).epsilon(1e-5));
      CHECK(n[1] - d[1] == doctest::Approx(-2.0 * 0.1 * 0.1).epsilon(1e-5));
    }
  }
  // The reference agrees with test_adam.cpp's hand-computed values.
  CHECK(want_plain[2][0] == doctest::Approx(0.8946448f).epsilon(1e-6));
  CHECK(want_decayed[2][1] == doctest::Approx(-2.2087699f).epsilon(1e-6));
}

TEST_CASE("decay_groups: matrices decay, vectors do not; frozen and repeated ones are left out") {
  nn::Sequential net{std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3)};
  const auto groups = optim::decay_groups(net, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].weight_decay == 0.1);
  CHECK(groups[1].weight_decay == 0.0);
  REQUIRE(groups[0].params.size() == 1);  // the Linear's weight [3, 4]
  CHECK(groups[0].params[0].shape() == Shape{3, 4});
  CHECK(groups[1].params.size() == 3);  // its bias, the norm's weight and bias: all [3]
  for (const Tensor& p : groups[1].params) CHECK(p.dim() == 1);

  Tensor w = param({1, 2, 3, 4}).reshape({2, 2}).detach().requires_grad_(true);
  Tensor frozen = from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const auto tied = optim::decay_groups({w, frozen, w}, 0.5);
  CHECK(tied[0].params.size() == 1);
  CHECK(tied[1].params.empty());
  optim::AdamW opt(tied);  // an empty group is allowed
  CHECK(opt.params().size() == 1);
}

TEST_CASE("AdamW groups resume exactly from their state dict; mismatched groups are refused") {
  auto make = [](Tensor a, Tensor b) {
    return optim::AdamW({{.params = {a}, .weight_decay = 0.2}, {.params = {b}}},
                        {.lr = 0.1, .weight_decay = 0.0});
  };
  Tensor a0 = param({1, -2}), b0 = param({3, 4});
  optim::AdamW straight = make(a0, b0);
  for (const auto& g : kGrads) {
    set_grad(a0, g);
    set_grad(b0, g);
    straight.step();
  }

  Tensor a = param({1, -2}), b = param({3, 4});
  StateDict sd;
  Metadata meta;
  {
    optim::AdamW first = make(a, b);
    set_grad(a, kGrads[0]);
    set_grad(b, kGrads[0]);
    first.step();
    first.state_dict(sd, meta);
  }
  CHECK(meta.at("optim.num_groups") == "2");
  CHECK(meta.at("optim.group.1.num_params") == "1");
  CHECK(std::stod(meta.at("optim.group.0.weight_decay")) == 0.2);
  // Built with other decays: the saved ones win, as torch's param_groups do.
  optim::AdamW resumed({{.params = {a}, .weight_decay = 0.9}, {.params = {b}}}, {.lr = 0.5});
  resumed.load_state_dict(sd, meta);
  CHECK(resumed.group_weight_decay(0) == 0.2);
  CHECK(resumed.group_weight_decay(1) == 0.0);
  for (size_t k = 1; k < kGrads.size(); ++k) {
    set_grad(a, kGrads[k]);
    set_grad(b, kGrads[k]);
    resumed.step();
  }
  CHECK(a.to_vector<float>() == a0.to_vector<float>());
  CHECK(b.to_vector<float>() == b0.to_vector<float>());

  optim::AdamW one_group({a, b});
  CHECK_THROWS_WITH_AS(one_group.load_state_dict(sd, meta),
                       doctest::Contains("has 1 parameter groups, the state dict has 2"), Error);
  optim::AdamW other_split({{.params = {}}, {.params = {a, b}}});
  CHECK_THROWS_WITH_AS(other_split.load_state_dict(sd, meta),
                       doctest::Contains("group 0 of this AdamW has 0 parameters, the state "
                                         "dict's has 1"),
                       Error);
  Metadata plain;
  optim::AdamW({a, b}).state_dict(sd, plain);
  CHECK(!plain.contains("optim.num_groups"));  // one group: the format older checkpoints have
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(StateDict{}, plain),
                       doctest::Contains("has 2 parameter groups, the state dict has one"), Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({{.params = {a}, .weight_decay = -1.0}}),
                       doctest::Contains("invalid weight_decay of group 0"), Error);
}
