// test_nn_ops.cpp: the neural-network ops of framework/ops/nn_*.cpp. Forward values are
// checked against hand computations (or a naive loop for conv), every differentiable input
// against finite differences (tests/gradcheck.h), and bad shapes against their messages.
// Device parity (cpu:1, cuda:0), including a small CNN composite, is tests/ops_cuda/.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "tests/gradcheck.h"
#include "tests/thread_count_scope.h"

using namespace dplab;
using dplab::testing::gradcheck;
using dplab::testing::leaf;

namespace {

void check_close(const Tensor& t, const std::vector<float>& want, float tol = 1e-5f) {
  std::vector<float> got = t.to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::abs(got[i] - want[i]) <= tol,
                  "element " << i << ": got " << got[i] << ", want " << want[i]);
}

// A leaf holding a seeded permutation of 0..n-1 times `gap`: values at least `gap` apart, so
// the finite-difference step (1e-2) never changes which element of a pooling window wins.
Tensor distinct_leaf(const Shape& s, uint64_t seed, float gap = 0.1f) {
  Generator g(seed);
  Tensor t = mul_scalar(randperm(shape_numel(s), &g).to(DType::Float32), gap).reshape(s).detach();
  t.requires_grad_(true);
  return t;
}

// The textbook 6-loop convolution, the reference for conv2d's im2col + GEMM.
std::vector<float> naive_conv(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                              int64_t pad) {
  auto xv = x.to_vector<float>(), wv = w.to_vector<float>(), bv = b.to_vector<float>();
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  int64_t O = w.size(0), kh = w.size(2), kw = w.size(3);
  int64_t oh = (H + 2 * pad - kh) / stride + 1, ow = (W + 2 * pad - kw) / stride + 1;
  std::vector<float> y(N * O * oh * ow);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = bv[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                int64_t r = i * stride - pad + u, q = j * stride - pad + v;
                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                s += xv[((n * C + c) * H + r) * W + q] * wv[((o * C + c) * kh + u) * kw + v];
              }
          y[((n * O + o) * oh + i) * ow + j] = static_cast<float>(s);
        }
  return y;
}

}  // namespace

// ---------------------------------------------------------------- softmax family

TEST_CASE("softmax and log_softmax of [1, 2, 3]") {
  Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3});
  check_close(softmax(x), {0.09003057f, 0.24472847f, 0.66524096f});
  check_close(log_softmax(x), {-2.40760596f, -1.40760596f, -0.40760596f});
  // a huge shift must not overflow: softmax is shift-invariant
  check_close(softmax(add_scalar(x, 1000.0f)), {0.09003057f, 0.24472847f, 0.66524096f});
}

TEST_CASE("softmax over dim 0 normalises columns") {
  Tensor x = from_vector(std::vector<float>{0, 0, std::log(3.0f), 0}, {2, 2});
  check_close(softmax(x, 0), {0.25f, 0.5f, 0.75f, 0.5f});
  check_close(softmax(x, -1), {0.5f, 0.5f, 0.75f, 0.25f});
}

TEST_CASE("softmax / log_softmax gradients over every dim") {
  for (int64_t dim : {-1, 0, 1}) {
    CAPTURE(dim);
    gradcheck("softmax", [dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); },
              {leaf({2, 3, 4}, 1)});
    gradcheck("log_softmax",
              [dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); },
              {leaf({2, 3, 4}, 2)});
  }
}

// ---------------------------------------------------------------- losses

TEST_CASE("nll_loss and cross_entropy known values") {
  Tensor logp = from_vector(std::vector<float>{-1, -2, -3, -4}, {2, 2});
  Tensor t = from_vector(std::vector<int64_t>{1, 0}, {2});
  check_close(nll_loss(logp, t, Reduction::None), {2.0f, 3.0f});
  CHECK(nll_loss(logp, t).item() == doctest::Approx(2.5));
  CHECK(nll_loss(logp, t, Reduction::Sum).item() == doctest::Approx(5.0));

  Tensor logits = from_vector(std::vector<float>{1, 2, 3, 1, 2, 3}, {2, 3});
  Tensor t2 = from_vector(std::vector<int64_t>{2, 0}, {2});
  check_close(cross_entropy(logits, t2, Reduction::None), {0.40760596f, 2.40760596f});
  CHECK(cross_entropy(logits, t2).item() == doctest::Approx(1.40760596).epsilon(1e-5));
  CHECK(cross_entropy(logits, t2, Reduction::Sum).item() ==
        doctest::Approx(2.81521192).epsilon(1e-5));
}

TEST_CASE("cross_entropy gradient is softmax minus one-hot, over N") {
  Tensor z = from_vector(std::vector<float>{1, 2, 3}, {1, 3});
  z.requires_grad_(true);
  cross_entropy(z, from_vector(std::vector<int64_t>{2}, {1})).backward();
  check_close(z.grad(), {0.09003057f, 0.24472847f, 0.66524096f - 1.0f});
}

TEST_CASE("loss gradients") {
  Tensor target = from_vector(std::vector<int64_t>{0, 3, 1, 3, 2}, {5});
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    CAPTURE(static_cast<int>(r));
    gradcheck("nll_loss", [&](const std::vector<Tensor>& in) { return nll_loss(in[0], target, r); },
              {leaf({5, 4}, 3)});
    gradcheck("cross_entropy",
              [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, r); },
              {leaf({5, 4}, 4)});
    gradcheck("mse_loss", [&](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); },
              {leaf({3, 4}, 5), leaf({3, 4}, 6)});
  }
}

TEST_CASE("mse_loss value") {
  Tensor a = from_vector(std::vector<float>{1, 2, 3}, {3});
  Tensor b = from_vector(std::vector<float>{1, 0, 6}, {3});
  CHECK(mse_loss(a, b).item() == doctest::Approx(13.0 / 3.0));
  CHECK(mse_loss(a, b, Reduction::Sum).item() == doctest::Approx(13.0));
}

TEST_CASE("loss errors name both shapes") {
  Tensor logits = zeros({3, 4});
  CHECK_THROWS_WITH_AS(cross_entropy(logits, zeros({3})), doctest::Contains("int64"), Error);
  CHECK_THROWS_WITH_AS(
      cross_entropy(logits, from_vector(std::vector<int64_t>{0, 1}, {2})),
      doctest::Contains("expected target of shape [3] for logits [3, 4], got target [2]"), Error);
  CHECK_THROWS_WITH_AS(nll_loss(zeros({3, 4, 2}), from_vector(std::vector<int64_t>{0, 1, 2}, {3})),
                       doctest::Contains("[N, C], got [3, 4, 2]"), Error);
  CHECK_THROWS_WITH_AS(nll_loss(logits, from_vector(std::vector<int64_t>{0, 4, 1}, {3})),
                       doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(mse_loss(zeros({4}), zeros({4, 1})),
                       doctest::Contains("got input [4] and target [4, 1]"), Error);
}

// ---------------------------------------------------------------- conv2d

TEST_CASE("conv2d forward, hand-computed") {
  // x = 0..8 as 3x3, a 2x2 kernel of ones: each output is its window's sum, plus the bias
  Tensor x = arange(9).reshape({1, 1, 3, 3});
  Tensor y = conv2d(x, ones({1, 1, 2, 2}), from_vector(std::vector<float>{0.5f}, {1}));
  CHECK(y.shape() == Shape{1, 1, 2, 2});
  check_close(y, {8.5f, 12.5f, 20.5f, 24.5f});
}

TEST_CASE("conv2d matches the naive loop") {
  Tensor x = leaf({2, 3, 5, 5}, 10), w = leaf({4, 3, 3, 3}, 11), b = leaf({4}, 12);
  for (auto [stride, pad] : {std::pair<int64_t, int64_t>{1, 0}, {1, 1}, {2, 0}, {2, 1}}) {
    CAPTURE(stride);
    CAPTURE(pad);
    Tensor y = conv2d(x, w, b, stride, pad);
    int64_t o = (5 + 2 * pad - 3) / stride + 1;
    CHECK(y.shape() == Shape{2, 4, o, o});
    check_close(y, naive_conv(x, w, b, stride, pad), 1e-4f);
  }
  // non-square kernel, no bias
  Tensor w2 = leaf({2, 3, 2, 3}, 13);
  check_close(conv2d(x, w2, {}, 1, 1), naive_conv(x, w2, zeros({2}), 1, 1), 1e-4f);
}

TEST_CASE("conv2d gradients for x, weight and bias") {
  for (auto [stride, pad] : {std::pair<int64_t, int64_t>{1, 0}, {1, 1}, {2, 0}, {2, 1}}) {
    CAPTURE(stride);
    CAPTURE(pad);
    gradcheck(
        "conv2d",
        [stride, pad](const std::vector<Tensor>& in) {
      return conv2d(in[0], in[1], in[2], stride, pad);
        },
        {leaf({2, 3, 5, 5}, 20), leaf({4, 3, 3, 3}, 21), leaf({4}, 22)});
  }
  gradcheck("conv2d no bias",
            [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], {}, 2, 1); },
            {leaf({2, 2, 4, 5}, 23), leaf({3, 2, 2, 3}, 24)});
}

TEST_CASE("conv2d with no input channels or no output channels") {
  // C = 0: every GEMM has K = 0, so y is the bias alone and dW is empty; db still sums g.
  Tensor x = leaf({2, 0, 5, 5}, 25), w = leaf({3, 0, 3, 3}, 26), b = leaf({3}, 27);
  Tensor y = conv2d(x, w, b, 1, 1);
  REQUIRE(y.shape() == Shape{2, 3, 5, 5});
  const std::vector<float> bv = b.to_vector<float>(), yv = y.to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i) CHECK(yv[i] == bv[(i / 25) % 3]);
  CHECK(conv2d(x, w, {}, 1, 1).to_vector<float>() == std::vector<float>(yv.size(), 0.0f));
  y.backward(ones(y.shape()));
  CHECK(b.grad().to_vector<float>() == std::vector<float>(3, 50.0f));  // 2 images x 25 positions
  CHECK(w.grad().shape() == w.shape());
  // O = 0: y is empty, and the dx GEMM has K = 0, so dx is all zeros.
  Tensor x2 = leaf({2, 2, 4, 4}, 28), w2 = leaf({0, 2, 3, 3}, 29);
  Tensor y2 = conv2d(x2, w2, {}, 1, 1);
  REQUIRE(y2.shape() == Shape{2, 0, 4, 4});
  y2.backward(ones(y2.shape()));
  CHECK(x2.grad().to_vector<float>() == std::vector<float>(x2.numel(), 0.0f));
}

TEST_CASE("conv2d over several image groups equals conv2d image by image") {
  // 4 channels, a 5x5 kernel, 14x14 padded by 2: 19,600 column floats per image. A batch of
  // 2*G + 1 is cut into three groups of about G images (conv2d_im2col.h, ImageGroups).
  const int64_t per_image = 4 * 5 * 5 * 14 * 14;
  const int64_t G = backend_for(Device("cpu")).im2col_group_floats() / per_image, N = 2 * G + 1;
  REQUIRE(G >= 2);  // groups of several images, or the side-by-side layout goes untested
  Tensor x = leaf({N, 4, 14, 14}, 30), w = leaf({3, 4, 5, 5}, 31), b = leaf({3}, 32);
  Tensor y = conv2d(x, w, b, 1, 2);
  check_close(y, naive_conv(x, w, b, 1, 2), 1e-3f);
  Tensor g = leaf(y.shape(), 33).detach();
  y.backward(g);
  std::vector<float> gw_sum(w.numel(), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    CAPTURE(n);
    Tensor xn = x.detach().narrow(n, 1).clone().requires_grad_(true);
    Tensor wn = w.detach().clone().requires_grad_(true);
    conv2d(xn, wn, b.detach(), 1, 2).backward(g.narrow(n, 1).clone());
    check_close(x.grad().narrow(n, 1).clone(), xn.grad().to_vector<float>(), 1e-4f);
    std::vector<float> gwn = wn.grad().to_vector<float>();
    for (size_t i = 0; i < gw_sum.size(); ++i) gw_sum[i] += gwn[i];
  }
  check_close(w.grad(), gw_sum, 1e-3f);  // dW sums over the images, across the groups too
}

TEST_CASE("conv2d with its image groups on 2 and 3 threads gives the one-thread results") {
  // On several threads conv2d runs one group per thread (Backend::run_pieces), and each
  // thread sums its own share of dW, added up at the end. 9 images of 19,600 column floats
  // fit one group on one thread; 2 and 3 threads cut them into 2 and 3 groups.
  Tensor x = leaf({9, 4, 14, 14}, 40), w = leaf({3, 4, 5, 5}, 41), b = leaf({3}, 42);
  Tensor g = leaf({9, 3, 14, 14}, 43).detach();
  auto run = [&] {
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    Tensor y = conv2d(x, w, b, 1, 2);
    y.backward(g);
    return std::vector<std::vector<float>>{y.to_vector<float>(), x.grad().to_vector<float>(),
                                           w.grad().to_vector<float>(),
                                           b.grad().to_vector<float>()};
  };
  const auto one = [&] {
    testing::ThreadCountScope single(1);
    return run();
  }();
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    testing::ThreadCountScope scope(threads);
    if (!scope.available()) {
      MESSAGE("skipping: built without OpenMP");
      break;
    }
    CHECK(backend_for(Device("cpu")).lanes() == threads);
    const auto many = run();
    const std::string names[] = {"y", "dx", "dW", "db"};
    for (int k = 0; k < 4; ++k) {
      CAPTURE(names[k]);
      REQUIRE(many[k].size() == one[k].size());
      for (size_t i = 0; i < one[k].size(); ++i)
        REQUIRE_MESSAGE(std::abs(many[k][i] - one[k][i]) <= 1e-4f * (1 + std::abs(one[k][i])),
                        "element " << i << ": got " << many[k][i] << ", want " << one[k][i]);
    }
  }
}

TEST_CASE("conv2d errors") {
  Tensor x = zeros({2, 3, 5, 5});
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({4, 2, 3, 3})),
                       doctest::Contains("input channels differ: input is [2, 3, 5, 5]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({4, 3, 6, 6})),
                       doctest::Contains("kernel 6x6 is larger than the padded input 5x5"), Error);
  CHECK_NOTHROW(conv2d(x, zeros({4, 3, 6, 6}), {}, 1, 1));
  CHECK_THROWS_WITH_AS(conv2d(zeros({3, 5, 5}), zeros({4, 3, 3, 3})),
                       doctest::Contains("expected input [N, C, H, W], got [3, 5, 5]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({4, 3, 3, 3}), zeros({3})),
                       doctest::Contains("bias must be [4]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, zeros({4, 3, 3, 3}), {}, 0),
                       doctest::Contains("stride must be >= 1"), Error);
}

// ---------------------------------------------------------------- pooling

TEST_CASE("max_pool2d picks the window maxima") {
  Tensor x = arange(16).reshape({1, 1, 4, 4});
  x.requires_grad_(true);
  Tensor y = max_pool2d(x, 2);
  check_close(y, {5, 7, 13, 15});
  sum(y).backward();
  std::vector<float> want(16, 0.0f);
  for (int i : {5, 7, 13, 15}) want[i] = 1.0f;
  check_close(x.grad(), want);
  // padding is -inf, not 0: all-negative inputs still give their own maxima
  Tensor neg = add_scalar(arange(16), -100.0f).reshape({1, 1, 4, 4});
  check_close(max_pool2d(neg, 2, 2, 1), {-100, -98, -97, -92, -90, -89, -88, -86, -85});
}

TEST_CASE("avg_pool2d counts padding in the divisor") {
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  check_close(avg_pool2d(x, 2, 2, 1), {0.25f, 0.5f, 0.75f, 1.0f});
  check_close(avg_pool2d(x, 2), {2.5f});
}

TEST_CASE("pooling gradients") {
  gradcheck("max_pool2d k2", [](const std::vector<Tensor>& in) { return max_pool2d(in[0], 2); },
            {distinct_leaf({2, 2, 4, 4}, 30)});
  gradcheck("max_pool2d k3 s2 p1 (overlapping)",
            [](const std::vector<Tensor>& in) { return max_pool2d(in[0], 3, 2, 1); },
            {distinct_leaf({2, 2, 5, 5}, 31)});
  gradcheck("avg_pool2d k2", [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 2); },
            {leaf({2, 2, 4, 4}, 32)});
  gradcheck("avg_pool2d k3 s2 p1",
            [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 3, 2, 1); },
            {leaf({2, 2, 5, 5}, 33)});
}

TEST_CASE("pooling errors") {
  Tensor x = zeros({1, 1, 4, 4});
  CHECK_THROWS_WITH_AS(max_pool2d(x, 2, 2, 2),
                       doctest::Contains("padding 2 must be at most half the kernel 2"), Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(x, 5),
                       doctest::Contains("kernel 5x5 is larger than the padded input 4x4"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(zeros({4, 4}), 2), doctest::Contains("[N, C, H, W], got [4, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(x, 0), doctest::Contains("kernel must be >= 1"), Error);
}

// ---------------------------------------------------------------- batch norm

TEST_CASE("batch_norm training: output and running stats after one step") {
  // channel 0: {1, 3}  mean 2, biased var 1, unbiased 2
  // channel 1: {2, 6}  mean 4, biased var 4, unbiased 8
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 6}, {2, 2});
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor y = batch_norm(x, rm, rv, {}, {}, /*training=*/true, 0.1f, 1e-5f);
  check_close(y, {-1, -1, 1, 1}, 1e-4f);
  check_close(rm, {0.2f, 0.4f});                // 0.9 * 0 + 0.1 * mean
  check_close(rv, {0.9f + 0.2f, 0.9f + 0.8f});  // 0.9 * 1 + 0.1 * unbiased var
  CHECK_FALSE(rm.requires_grad());

  // eval uses the running stats: (x - rm) / sqrt(rv + eps) * w + b
  Tensor w = from_vector(std::vector<float>{2, 3}, {2}),
         b = from_vector(std::vector<float>{1, -1}, {2});
  Tensor ye = batch_norm(x, rm, rv, w, b, /*training=*/false, 0.1f, 1e-5f);
  auto e = [](float v, float m, float var, float ww, float bb) {
    return (v - m) / std::sqrt(var + 1e-5f) * ww + bb;
  };
  check_close(ye,
              {e(1, 0.2f, 1.1f, 2, 1), e(2, 0.4f, 1.7f, 3, -1), e(3, 0.2f, 1.1f, 2, 1),
               e(6, 0.4f, 1.7f, 3, -1)},
              1e-4f);
  check_close(rm, {0.2f, 0.4f});  // eval leaves them alone
}

TEST_CASE("batch_norm on [N, C, H, W] counts N*H*W per channel") {
  // one channel, values 0..7 over N=2, H=2, W=2: mean 3.5, unbiased var 6
  Tensor x = arange(8).reshape({2, 1, 2, 2});
  Tensor rm = zeros({1}), rv = zeros({1});
  Tensor y = batch_norm(x, rm, rv, {}, {}, true, 0.5f, 1e-5f);
  check_close(rm, {1.75f});
  check_close(rv, {3.0f});
  CHECK(mean(y).item() == doctest::Approx(0.0).epsilon(1e-5));
  CHECK(mean(mul(y, y)).item() == doctest::Approx(1.0).epsilon(1e-4));
}

TEST_CASE("batch_norm gradients, train and eval, affine or not") {
  for (bool training : {true, false}) {
    CAPTURE(training);
    for (Shape s : {Shape{6, 3}, Shape{2, 3, 3, 3}}) {
      Tensor rm = from_vector(std::vector<float>{0.1f, -0.2f, 0.3f}, {3});
      Tensor rv = from_vector(std::vector<float>{0.5f, 1.5f, 2.0f}, {3});
      // gradcheck calls f many times: each call starts from the same running stats
      auto f = [&, training](const std::vector<Tensor>& in) {
        return batch_norm(in[0], rm.clone().detach(), rv.clone().detach(), in[1], in[2], training,
                          0.1f, 1e-5f);
      };
      gradcheck("batch_norm", f,
                {leaf(s, 40, 2.0f, 1.0f), leaf({3}, 41, 0.5f, 1.0f), leaf({3}, 42)});
      gradcheck(
          "batch_norm affine=false",
          [&, training](const std::vector<Tensor>& in) {
        return batch_norm(in[0], rm.clone().detach(), rv.clone().detach(), {}, {}, training, 0.1f,
                          1e-5f);
          },
          {leaf(s, 43)});
    }
  }
}

TEST_CASE("batch_norm errors") {
  Tensor x = zeros({4, 3});
  CHECK_THROWS_WITH_AS(
      batch_norm(x, zeros({2}), ones({2}), {}, {}, true, 0.1f, 1e-5f),
      doctest::Contains("running_mean must be [3] for input [4, 3] (C = 3), got [2]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, {}, {}, ones({4}), {}, true, 0.1f, 1e-5f),
                       doctest::Contains("weight must be [3]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(zeros({4, 3, 2}), {}, {}, {}, {}, true, 0.1f, 1e-5f),
                       doctest::Contains("got [4, 3, 2]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(zeros({1, 3}), {}, {}, {}, {}, true, 0.1f, 1e-5f),
                       doctest::Contains("more than 1 value per channel"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, {}, {}, {}, {}, false, 0.1f, 1e-5f),
                       doctest::Contains("eval mode needs running_mean"), Error);
}

// ---------------------------------------------------------------- dropout

TEST_CASE("dropout: seeded, keeps 1-p, scales by 1/(1-p)") {
  Tensor x = ones({10000});
  Generator g1(7), g2(7), g3(8);
  Tensor a = dropout(x, 0.3f, true, &g1), b = dropout(x, 0.3f, true, &g2),
         c = dropout(x, 0.3f, true, &g3);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  int64_t kept = 0;
  for (float v : a.to_vector<float>()) {
    if (v != 0.0f) {
      ++kept;
      CHECK(v == doctest::Approx(1.0 / 0.7));
    }
  }
  // binomial(10000, 0.7): std 46, so +-200 is more than 4 sigma
  CHECK(kept > 6800);
  CHECK(kept < 7200);

  // the default generator, reseeded, repeats too
  manual_seed(11);
  Tensor d1 = dropout(x, 0.5f, true);
  manual_seed(11);
  Tensor d2 = dropout(x, 0.5f, true);
  CHECK(d1.to_vector<float>() == d2.to_vector<float>());
}

TEST_CASE("dropout identity cases, gradient and errors") {
  Tensor x = leaf({4, 5}, 50);
  CHECK(dropout(x, 0.5f, /*training=*/false).to_vector<float>() == x.to_vector<float>());
  CHECK(dropout(x, 0.0f, true).to_vector<float>() == x.to_vector<float>());
  // d(x * mask)/dx = mask: the same seeded mask on every call
  gradcheck(
      "dropout",
      [](const std::vector<Tensor>& in) {
    Generator g(3);
    return dropout(in[0], 0.4f, true, &g);
      },
      {x});
  CHECK_THROWS_WITH_AS(dropout(x, 1.0f, true), doctest::Contains("p must lie in [0, 1), got 1"),
                       Error);
  CHECK_THROWS_WITH_AS(dropout(x, -0.1f, true), doctest::Contains("p must lie in [0, 1)"), Error);
}
