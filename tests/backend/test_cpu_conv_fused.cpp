// test_cpu_conv_fused.cpp: conv2d_relu_max_pool2d (ops/nn_conv.cpp, backend/cpu/fast/cpu_conv_fused.cpp)
// against the three ops it fuses, max_pool2d(relu(conv2d(...)), 2): the output and all three
// gradients must be the same floats, bit for bit, on random shapes (odd output sizes whose
// last row and column no window covers, channel counts past the kernel's blocks, no bias,
// no input gradient), for both builds of the kernel and on 1 and 2 threads. Random N(0, 1)
// data makes half the convolution outputs negative, so many windows are all zeros after the
// ReLU; but there the ReLU has already cut the window off, so its tie rule shows only on
// positive ties: an all-zero input with a positive bias makes every window a 4-way tie of
// the bias, and every dx entry depends on which element wins. Then: what the fused op
// keeps for backward against the three ops, and where the fused path declines
// (strided, im2col, switched off) the three ops run.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "framework/autograd/node.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "tests/thread_count_scope.h"

using namespace dplab;

namespace {

struct FusedScope {  // the settings for one block, put back afterwards
  bool fused_before = fused_conv();
  ConvAlgorithm algo_before = conv_algorithm();
  GemmIsa isa_before = gemm_isa();
  FusedScope(bool fused, ConvAlgorithm a = ConvAlgorithm::Direct, GemmIsa isa = gemm_isa()) {
    set_fused_conv(fused);
    set_conv_algorithm(a);
    set_gemm_isa(isa);
  }
  ~FusedScope() {
    set_fused_conv(fused_before);
    set_conv_algorithm(algo_before);
    set_gemm_isa(isa_before);
  }
};

struct Case {
  int64_t N, C, H, W, O, k, stride, pad;
  bool bias, x_grad;
};

struct Run {
  std::vector<std::vector<float>> values;  // y, dW, then dx and db where asked
  std::string node;                        // the output's backward node
};

// y = conv2d_relu_max_pool2d(x, W, b); backward of sum(y * R), under the current settings.
Run run(const Case& c, uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({c.N, c.C, c.H, c.W}, {}, &gen).detach();
  Tensor w = randn({c.O, c.C, c.k, c.k}, {}, &gen).detach();
  Tensor b = randn({c.O}, {}, &gen).detach();
  x.requires_grad_(c.x_grad);
  w.requires_grad_(true);
  b.requires_grad_(true);
  Tensor y = conv2d_relu_max_pool2d(x, w, c.bias ? b : Tensor(), c.stride, c.pad);
  Run r{{y.to_vector<float>()}, y.grad_fn()->name()};
  y.backward(randn(y.shape(), {}, &gen));
  r.values.push_back(w.grad().to_vector<float>());
  if (c.x_grad) r.values.push_back(x.grad().to_vector<float>());
  if (c.bias) r.values.push_back(b.grad().to_vector<float>());
  return r;
}

std::vector<Case> cases() {
  // x: [N, C, H, W], weight: [O, C, k, k], one case to a row
  // clang-format off
  std::vector<Case> all = {
    // N  C   H   W   O   k  stride  pad  bias   x_grad
      {3, 1,  28, 28, 16, 5, 1,      2,   true,  false},  // LeNet conv1
      {2, 16, 14, 14, 32, 5, 1,      2,   true,  true},   // LeNet conv2
      {1, 3,  7,  9,  70, 3, 1,      1,   false, true},   // odd sizes, O > 64
  };
  // clang-format on
  std::mt19937 gen(11);
  auto pick = [&gen](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  for (int n = 0; n < 10; ++n) {
    Case c{.N = pick(1, 3),
           .C = pick(1, 18),
           .H = pick(4, 13),
           .W = pick(4, 21),
           .O = pick(1, 40),
           .k = pick(1, 5),
           .stride = 1,
           .pad = 0,
           .bias = pick(0, 1) == 1,
           .x_grad = pick(0, 3) > 0};
    c.pad = pick(0, static_cast<int>(c.k) - 1);
    c.k = std::min<int64_t>(c.k, std::min(c.H, c.W));
    c.pad = std::min(c.pad, c.k - 1);
    all.push_back(c);
  }
  return all;
}

void check_fused_equals_unfused(GemmIsa isa) {
  for (int threads : {1, 2}) {
    testing::ThreadCountScope scope(threads);
    if (!scope.available()) continue;
    uint64_t seed = 300;
    for (const Case& c : cases()) {
      CAPTURE(threads);
      CAPTURE(c.N);
      CAPTURE(c.C);
      CAPTURE(c.H);
      CAPTURE(c.W);
      CAPTURE(c.O);
      CAPTURE(c.k);
      CAPTURE(c.pad);
      CAPTURE(c.bias);
      CAPTURE(c.x_grad);
      Run ref, got;
      {
        FusedScope unfused(false, ConvAlgorithm::Direct, isa);
        ref = run(c, seed);
      }
      {
        FusedScope fused(true, ConvAlgorithm::Direct, isa);
        got = run(c, seed);
      }
      ++seed;
      CHECK(ref.node == "MaxPool2dBackward");
      CHECK(got.node == "Conv2dReluMaxPool2dBackward");
      REQUIRE(got.values.size() == ref.values.size());
      for (size_t k = 0; k < ref.values.size(); ++k) {
        CAPTURE(k);  // 0 y, 1 dW, then dx (if asked), then db (if a bias)
        CHECK(got.values[k] == ref.values[k]);  // the same floats, to the bit
      }
    }
  }
}

}  // namespace

TEST_CASE(
    "conv2d_relu_max_pool2d equals max_pool2d(relu(conv2d)) to the bit, baseline (AVX2) kernel") {
  check_fused_equals_unfused(GemmIsa::Baseline);
}

TEST_CASE("conv2d_relu_max_pool2d equals max_pool2d(relu(conv2d)) to the bit, AVX-512 kernel" *
          doctest::skip(!gemm_isa_available(GemmIsa::Avx512))) {
  check_fused_equals_unfused(GemmIsa::Avx512);
}

TEST_CASE(
    "ties: an all-zero input with a positive bias, every window a tie; the first element wins") {
  // x = 0, so conv2d(x) = b > 0 everywhere: relu passes it, every 2x2 window ties. The winner
  // (top-left, as max_pool2d's rule) takes the window's gradient into dW, db and dx.
  auto run_ties = [](bool fused) {
    FusedScope scope(fused);
    Generator gen(5);
    Tensor x = zeros({1, 2, 8, 8}).detach();
    Tensor w = randn({3, 2, 3, 3}, {}, &gen).detach();
    Tensor b = full({3}, 0.25f).detach();
    x.requires_grad_(true);
    w.requires_grad_(true);
    b.requires_grad_(true);
    Tensor y =
        fused ? conv2d_relu_max_pool2d(x, w, b, 1, 1) : max_pool2d(relu(conv2d(x, w, b, 1, 1)), 2);
    y.backward(randn(y.shape(), {}, &gen));
    return std::vector<std::vector<float>>{y.to_vector<float>(), x.grad().to_vector<float>(),
                                           w.grad().to_vector<float>(),
                                           b.grad().to_vector<float>()};
  };
  const auto ref = run_ties(false), got = run_ties(true);
  for (size_t k = 0; k < ref.size(); ++k) {
    CAPTURE(k);  // y, dx, dW, db
    CHECK(got[k] == ref[k]);
  }
  // the rule itself: each window's gradient goes to its top-left element. dx is then conv2d's
  // input gradient for that sparse upstream gradient, which the ops compute without pooling.
  Generator gen(5);
  Tensor w = randn({3, 2, 3, 3}, {}, &gen).detach();
  std::vector<float> g = randn({1, 3, 4, 4}, {}, &gen).to_vector<float>();
  std::vector<float> sparse(3 * 8 * 8, 0.0f);
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) sparse[(o * 8 + 2 * i) * 8 + 2 * j] = g[(o * 4 + i) * 4 + j];
  Tensor x = zeros({1, 2, 8, 8}).detach();
  x.requires_grad_(true);
  conv2d(x, w, full({3}, 0.25f), 1, 1).backward(from_vector(sparse, {1, 3, 8, 8}));
  const std::vector<float> expected = x.grad().to_vector<float>();
  REQUIRE(expected.size() == 128u);
  int differ = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    differ += std::abs(expected[i] - got[1][i]) > 1e-5f * (1.0f + std::abs(expected[i]));
  CHECK_MESSAGE(differ == 0, differ << " of 128 dx entries are not the top-left winner's");
}

TEST_CASE(
    "the fused op keeps a byte per output for backward, not the convolution output and argmax") {
  const Device cpu("cpu");
  auto kept = [&](bool fused) {  // bytes allocated by a forward, less its output
    FusedScope scope(fused);
    Tensor x = randn({4, 16, 14, 14});
    Tensor w = randn({32, 16, 5, 5}).requires_grad_(true);
    Tensor b = randn({32}).requires_grad_(true);
    const int64_t before = memory_stats(cpu).allocated_bytes;
    Tensor y = conv2d_relu_max_pool2d(x, w, b, 1, 2);
    return memory_stats(cpu).allocated_bytes - before - y.nbytes();
  };
  const int64_t conv_output = 4 * 32 * 14 * 14 * 4, outputs = 4 * 32 * 7 * 7;
  CHECK(kept(false) == conv_output + outputs * 8);  // the ReLU's input, the pool's int64 argmax
  CHECK(kept(true) == (outputs + 7) / 8 * 8);       // a byte each, in whole int64s
}

TEST_CASE("where the fused path declines, the three ops run") {
  const Case strided{.N = 2,
                     .C = 3,
                     .H = 9,
                     .W = 9,
                     .O = 4,
                     .k = 3,
                     .stride = 2,
                     .pad = 1,
                     .bias = true,
                     .x_grad = true};
  const Case plain{.N = 2,
                   .C = 3,
                   .H = 8,
                   .W = 8,
                   .O = 4,
                   .k = 3,
                   .stride = 1,
                   .pad = 1,
                   .bias = true,
                   .x_grad = true};
  FusedScope on(true);
  CHECK(run(strided, 1).node == "MaxPool2dBackward");  // a strided input gradient is not direct
  {
    FusedScope im2col(true, ConvAlgorithm::Im2col);
    CHECK(run(plain, 1).node == "MaxPool2dBackward");
  }
  {
    FusedScope off(false);
    CHECK(run(plain, 1).node == "MaxPool2dBackward");
  }
  CHECK(run(plain, 1).node == "Conv2dReluMaxPool2dBackward");
  // a 1-pixel convolution output has no 2x2 window: max_pool2d's own error, unfused
  const Case tiny{.N = 1,
                  .C = 1,
                  .H = 3,
                  .W = 3,
                  .O = 2,
                  .k = 3,
                  .stride = 1,
                  .pad = 0,
                  .bias = false,
                  .x_grad = false};
  CHECK_THROWS_WITH(run(tiny, 1), doctest::Contains("max_pool2d"));
}
