// test_nn_layers.cpp: the layers' numbers: forward equals the op it wraps, gradients by
// finite differences through whole modules, PyTorch's initialisation bounds and seeding,
// BatchNorm's train/eval statistics, Dropout's train/eval behaviour.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/init.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "models/mlp.h"
#include "tests/gradcheck.h"

using namespace dplab;

namespace {
void check_close(const Tensor& a, const Tensor& b, float tol = 1e-5f) {
  REQUIRE(a.shape() == b.shape());
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(x[i] - y[i]) <= tol + tol * std::abs(y[i]));
}

float max_abs(const Tensor& t) {
  float m = 0;
  for (float v : t.to_vector<float>()) m = std::max(m, std::abs(v));
  return m;
}
}  // namespace

TEST_CASE("Linear forward is x W^T + b, for 2-D and 3-D inputs") {
  manual_seed(11);
  nn::Linear lin(3, 2);
  Tensor x = randn({4, 3});
  check_close(lin(x), add(matmul(x, lin.weight.t()), lin.bias));
  Tensor x3 = randn({2, 4, 3});
  Tensor y3 = lin(x3);
  CHECK(y3.shape() == Shape{2, 4, 2});
  check_close(reshape(y3, {8, 2}), linear(reshape(x3, {8, 3}), lin.weight, lin.bias));
  nn::Linear nob(3, 2, {.bias = false});
  CHECK_FALSE(nob.bias.defined());
  CHECK(nob.parameters().size() == 1);
  CHECK(nob.name() == "Linear(in_features=3, out_features=2, bias=false)");
  check_close(nob(x), matmul(x, nob.weight.t()));
  CHECK_THROWS_WITH_AS(lin(randn({4, 5})), doctest::Contains("expected input [..., 3], got [4, 5]"),
                       Error);
}

TEST_CASE("Conv2d and the pools forward equal their ops") {
  manual_seed(12);
  nn::Conv2d conv(2, 3, 3, {.stride = 2, .padding = 1});
  CHECK(conv.weight.shape() == Shape{3, 2, 3, 3});
  Tensor x = randn({2, 2, 7, 7});
  Tensor y = conv(x);
  CHECK(y.shape() == Shape{2, 3, 4, 4});  // (7 + 2 - 3) / 2 + 1
  check_close(y, conv2d(x, conv.weight, conv.bias, 2, 1));
  CHECK(conv.name() == "Conv2d(2, 3, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
  check_close(nn::MaxPool2d(2)(x), max_pool2d(x, 2, 2, 0));
  check_close(nn::AvgPool2d(3, {.stride = 2, .padding = 1})(x), avg_pool2d(x, 3, 2, 1));
  CHECK(nn::MaxPool2d(2).name() == "MaxPool2d(kernel_size=2, stride=2, padding=0)");
  CHECK(nn::Flatten()(x).shape() == Shape{2, 98});
  CHECK(nn::Flatten(0, 1)(x).shape() == Shape{4, 7, 7});
  CHECK_THROWS_WITH_AS(conv(randn({2, 3, 7, 7})), doctest::Contains("expected input [N, 2, H, W]"),
                       Error);
}

TEST_CASE("gradients through modules match finite differences") {
  manual_seed(13);
  nn::Sequential net{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Linear>(4, 2)};
  std::vector<Tensor> inputs{testing::leaf({5, 3}, 1)};
  for (const Tensor& p : net.parameters()) inputs.push_back(p);
  testing::gradcheck(
      "Linear-Linear", [&](const std::vector<Tensor>& in) { return net(in[0]); }, inputs);

  nn::Conv2d conv(2, 3, 3, {.stride = 1, .padding = 1});
  std::vector<Tensor> cin{testing::leaf({2, 2, 4, 4}, 2), conv.weight, conv.bias};
  testing::gradcheck(
      "Conv2d", [&](const std::vector<Tensor>& in) { return conv(in[0]); }, cin);

  nn::BatchNorm2d bn(2);
  bn.eval();  // fixed statistics: the function is smooth in x, weight and bias
  {
    NoGradGuard g;
    bn.running_mean.fill_(0.3);
    bn.running_var.fill_(2.0);
  }
  std::vector<Tensor> bin{testing::leaf({3, 2, 2, 2}, 3), bn.weight, bn.bias};
  testing::gradcheck(
      "BatchNorm2d eval", [&](const std::vector<Tensor>& in) { return bn(in[0]); }, bin);
}

TEST_CASE("default initialisation: PyTorch's bounds, drawn from the seeded generator") {
  manual_seed(21);
  nn::Linear lin(784, 256);
  const float b = 1.0f / std::sqrt(784.0f);
  CHECK(max_abs(lin.weight) <= b);
  CHECK(max_abs(lin.weight) > 0.99f * b);  // 200k draws reach the edge of U(-b, b)
  CHECK(max_abs(lin.bias) <= b);
  CHECK(std::abs(lin.weight.mean().item()) < 0.05f * b);
  nn::Conv2d conv(16, 32, 5);
  const float bc = 1.0f / std::sqrt(16.0f * 25.0f);
  CHECK(max_abs(conv.weight) <= bc);
  CHECK(max_abs(conv.weight) > 0.95f * bc);
  CHECK(max_abs(conv.bias) <= bc);

  manual_seed(7);
  models::MLP a;
  manual_seed(7);
  models::MLP b2;
  manual_seed(8);
  models::MLP c;
  for (const auto& [k, t] : a.state_dict()) {
    CHECK(t.to_vector<float>() == b2.state_dict().at(k).to_vector<float>());
    CHECK(t.to_vector<float>() != c.state_dict().at(k).to_vector<float>());
  }
  CHECK(nn::init::fan_in({8, 3, 5, 5}) == 75);
  CHECK(nn::init::fan_out({8, 3, 5, 5}) == 200);
}

TEST_CASE("BatchNorm trains on batch statistics and evaluates on running ones") {
  // Channel 0: 1..4 (mean 2.5, biased var 1.25, unbiased 5/3); channel 1: 2, 2, 6, 6
  // (mean 4, biased var 4, unbiased 16/3).
  Tensor x = from_vector(std::vector<float>{1, 2, 2, 2, 3, 6, 4, 6}, {4, 2});
  nn::BatchNorm1d bn(2);
  Tensor y = bn(x);
  CHECK(y.at({0, 0}) == doctest::Approx((1 - 2.5) / std::sqrt(1.25 + 1e-5)).epsilon(1e-4));
  CHECK(y.at({3, 1}) == doctest::Approx((6 - 4) / std::sqrt(4 + 1e-5)).epsilon(1e-4));
  CHECK(bn.running_mean.at({0}) == doctest::Approx(0.1 * 2.5));
  CHECK(bn.running_mean.at({1}) == doctest::Approx(0.1 * 4.0));
  CHECK(bn.running_var.at({0}) == doctest::Approx(0.9 + 0.1 * 5.0 / 3.0));
  CHECK(bn.running_var.at({1}) == doctest::Approx(0.9 + 0.1 * 16.0 / 3.0));
  CHECK(bn.num_batches_tracked.item_int() == 1);
  bn(x);
  CHECK(bn.num_batches_tracked.item_int() == 2);
  CHECK(bn.running_mean.at({0}) == doctest::Approx(0.9 * 0.25 + 0.1 * 2.5));

  bn.eval();
  const float rm = bn.running_mean.at({1}), rv = bn.running_var.at({1});
  Tensor ye = bn(x);
  CHECK(ye.at({2, 1}) == doctest::Approx((6 - rm) / std::sqrt(rv + 1e-5)).epsilon(1e-4));
  CHECK(bn.num_batches_tracked.item_int() == 2);  // eval changes nothing
  CHECK(bn.running_mean.at({1}) == rm);

  // momentum, and [N, C, L] inputs
  nn::BatchNorm1d fast(2, {.momentum = 0.5});
  // As [N=2, C=2, L=2], channel 0 holds 1, 2, 3, 6 (mean 3).
  Tensor y3 = fast(reshape(x, {2, 2, 2}));
  CHECK(y3.shape() == Shape{2, 2, 2});
  CHECK(fast.running_mean.at({0}) == doctest::Approx(0.5 * 3.0));

  // Without running statistics: batch statistics in eval too, and no buffers.
  nn::BatchNorm1d free(2, {.affine = false, .track_running_stats = false});
  CHECK(free.parameters().empty());
  CHECK(free.buffers().empty());
  free.eval();
  check_close(free(x), y);
  CHECK_THROWS_WITH_AS(bn(randn({4, 3})),
                       doctest::Contains("expected input [N, C] or [N, C, L] with 2 channels"),
                       Error);
  nn::BatchNorm2d bn2(3);
  CHECK(bn2(randn({2, 3, 4, 4})).shape() == Shape{2, 3, 4, 4});
  CHECK(bn2.num_batches_tracked.item_int() == 1);
}

TEST_CASE("Dropout drops in training, is the identity in eval, and follows its generator") {
  manual_seed(31);
  Tensor x = ones({100, 100});
  nn::Dropout drop(0.5);
  auto v = drop(x).to_vector<float>();
  int zeros_n = 0;
  for (float e : v) {
    CHECK((e == 0.0f || e == 2.0f));  // survivors scaled by 1/(1-p)
    zeros_n += e == 0.0f;
  }
  CHECK(zeros_n > 4700);  // 10000 draws, p = 0.5: 5000 +- 50 (1 sigma)
  CHECK(zeros_n < 5300);
  drop.eval();
  CHECK(drop(x).to_vector<float>() == x.to_vector<float>());

  Generator g1(99), g2(99);
  nn::Dropout d1(0.3, &g1), d2(0.3, &g2);
  CHECK(d1(x).to_vector<float>() == d2(x).to_vector<float>());
  CHECK(d1.name() == "Dropout(p=0.3)");
  CHECK_THROWS_AS(nn::Dropout(1.0), Error);
}
