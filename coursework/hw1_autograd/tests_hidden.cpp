// tests_hidden.cpp: the hw1 tests kept for grading: more shapes (batch 1, non-square),
// gloss != 1, convolutions with stride and padding, overlapping pooling windows, and finite
// differences of the forward as a second opinion besides autograd.
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "grading.h"

using namespace hw1;
using namespace hw1::grading;

namespace {

void check_matmul(int64_t m, int64_t k, int64_t n, bool numeric) {
  const Tensor a = randn({m, k}), b = randn({k, n});
  check(fmt::format("y = a @ b with a [{}, {}] and b [{}, {}]", m, k, k, n),
        [](const auto& in) { return matmul(in[0], in[1]); }, {a, b}, {"ga", "gb"}, {"a", "b"},
        [&](const Tensor& gy) {
          MatmulGrads g = matmul_backward(a, b, gy);
          return std::vector<Tensor>{g.ga, g.gb};
        }, numeric);
}

void check_cross_entropy(int64_t batch, int64_t classes, bool numeric) {
  const Tensor logits = mul_scalar(randn({batch, classes}), 3.0f);
  const Tensor target = randint(0, classes, {batch}, {.dtype = DType::Int64});
  check(fmt::format("cross entropy of logits [{}, {}]", batch, classes),
        [&](const auto& in) { return cross_entropy(in[0], target); }, {logits}, {"dlogits"}, {"logits"},
        [&](const Tensor& gy) {
          return std::vector<Tensor>{cross_entropy_backward(logits, target, gy.item())};
        }, numeric);
}

void check_conv(Shape x_shape, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool numeric) {
  const Tensor x = randn(x_shape), w = randn({out, x_shape[1], kernel, kernel}), b = randn({out});
  check(fmt::format("conv2d of x [{}, {}, {}, {}] with {} {}x{} filters, stride {}, padding {}", x_shape[0],
                    x_shape[1], x_shape[2], x_shape[3], out, kernel, kernel, stride, padding),
        [&](const auto& in) { return conv2d(in[0], in[1], in[2], stride, padding); }, {x, w, b},
        {"gx", "gw", "gb"}, {"x", "w", "b"}, [&](const Tensor& gy) {
          Conv2dGrads g = conv2d_backward(x, w, gy, stride, padding);
          return std::vector<Tensor>{g.gx, g.gw, g.gb};
        }, numeric);
}

void check_pool(Shape x_shape, int64_t kernel, int64_t stride) {
  const Tensor x = randn(x_shape);  // continuous values: no ties inside a window
  check(fmt::format("max_pool2d of x [{}, {}, {}, {}] with {}x{} windows, stride {}", x_shape[0], x_shape[1],
                    x_shape[2], x_shape[3], kernel, kernel, stride),
        [&](const auto& in) { return max_pool2d(in[0], kernel, stride); }, {x}, {"gx"}, {"x"},
        [&](const Tensor& gy) { return std::vector<Tensor>{max_pool2d_backward(x, gy, kernel, stride)}; });
}

// Whole numbers 0 to 3: most windows hold their maximum more than once.
Tensor with_ties(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + i / 3) % 4);
  return from_vector(v, shape);
}

// gx when every tied maximum of a window gets the window's gradient (the mistake), and the
// first window that has a tie, in words.
Tensor every_tie_gets_it(const Tensor& x, const Tensor& gy, int64_t kernel, int64_t stride, std::string& example) {
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = gy.shape()[2], ow = gy.shape()[3];
  Tensor gx = zeros(x.shape());
  const float* xs = x.data<float>();
  const float* gs = gy.data<float>();
  float* out = gx.data<float>();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        float best = -1e30f;
        for (int64_t di = 0; di < kernel; ++di)
          for (int64_t dj = 0; dj < kernel; ++dj) best = std::max(best, xs[p * h * w + (i * stride + di) * w + j * stride + dj]);
        std::vector<std::string> at;
        for (int64_t di = 0; di < kernel; ++di)
          for (int64_t dj = 0; dj < kernel; ++dj)
            if (xs[p * h * w + (i * stride + di) * w + j * stride + dj] == best) {
              out[p * h * w + (i * stride + di) * w + j * stride + dj] += gs[(p * oh + i) * ow + j];
              at.push_back(fmt::format("[{}, {}]", i * stride + di, j * stride + dj));
            }
        if (at.size() > 1 && example.empty())
          example = fmt::format("the window of y[{}, {}, {}, {}] holds its maximum {} at {}", p / x.shape()[1],
                                p % x.shape()[1], i, j, best, fmt::join(at, " and "));
      }
  return gx;
}

void check_pool_ties(Shape x_shape, int64_t kernel, int64_t stride) {
  const Tensor x = with_ties(x_shape);
  Generator gen(grade_seed() + 7);
  const Tensor gy = randn({x_shape[0], x_shape[1], out_size(x_shape[2], kernel, stride, 0),
                           out_size(x_shape[3], kernel, stride, 0)}, {}, &gen);
  const std::string what = fmt::format("max_pool2d of x [{}, {}, {}, {}] of whole numbers (ties) with {}x{} windows, "
                                       "stride {}", x_shape[0], x_shape[1], x_shape[2], x_shape[3], kernel, kernel,
                                       stride);
  Tensor got;
  {
    NoGradGuard no_grad;  // the student's backward runs without autograd
    got = max_pool2d_backward(x, gy, kernel, stride);
  }
  const Tensor want = autograd([&](const auto& in) { return max_pool2d(in[0], kernel, stride); }, {x}, gy)[0];
  std::string why = compare("gx", "x", got, want);
  if (!why.empty()) {
    std::string example;
    const Tensor all = every_tie_gets_it(x, gy, kernel, stride, example);
    if (compare("gx", "x", got, all).empty())
      why = fmt::format("on a tie your gradient goes to every maximum of the window ({}): it goes to the first one "
                        "only, in row-major order, the one the forward's argmax picks", example);
  }
  CHECK_MESSAGE(why.empty(), what << ": " << why);
}

}  // namespace

TEST_SUITE("hidden") {

TEST_CASE("matmul_backward with batch 1 and non-square shapes and finite differences (15 points)") {
  seed_inputs(11);
  check_matmul(1, 7, 3, true);
  check_matmul(5, 1, 6, true);
  check_matmul(33, 17, 9, false);
  check_matmul(4, 4, 4, true);
}

TEST_CASE("cross_entropy_backward with one sample and many classes and finite differences (10 points)") {
  seed_inputs(12);
  check_cross_entropy(1, 10, true);
  check_cross_entropy(7, 3, true);
  check_cross_entropy(64, 100, false);
}

TEST_CASE("conv2d_backward with stride 1 and no padding (10 points)") {
  seed_inputs(13);
  check_conv({2, 3, 6, 6}, 4, 3, 1, 0, false);
}

TEST_CASE("conv2d_backward with stride 2 and padding on non-square images and batch 1 (15 points)") {
  seed_inputs(14);
  check_conv({1, 2, 7, 5}, 3, 3, 2, 1, false);
  check_conv({3, 1, 8, 11}, 2, 5, 2, 2, false);
  check_conv({2, 4, 5, 5}, 6, 1, 1, 0, false);
}

TEST_CASE("conv2d_backward against finite differences (5 points)") {
  seed_inputs(15);
  check_conv({1, 2, 5, 4}, 2, 3, 1, 1, true);
}

TEST_CASE("max_pool2d_backward with 2x2 windows and stride 2 (10 points)") {
  seed_inputs(16);
  check_pool({2, 3, 8, 8}, 2, 2);
  check_pool({1, 1, 6, 10}, 2, 2);
}

TEST_CASE("max_pool2d_backward with ties: the first maximum of a window takes the gradient (5 points)") {
  check_pool_ties({2, 2, 6, 6}, 2, 2);
  check_pool_ties({1, 2, 7, 7}, 3, 2);
}

TEST_CASE("max_pool2d_backward with overlapping 3x3 windows and stride 2 on odd sizes (10 points)") {
  seed_inputs(17);
  check_pool({2, 2, 9, 7}, 3, 2);
  check_pool({1, 3, 5, 5}, 3, 1);
}

}  // TEST_SUITE
