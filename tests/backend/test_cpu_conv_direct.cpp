// test_cpu_conv_direct.cpp: the CPU's direct convolution (backend/cpu/fast/cpu_conv_direct.cpp)
// against the reference, im2col + GEMM (ops/conv2d_im2col.cpp: the same conv2d op with
// DPLAB_CONV's setting at im2col): the
// output and all three gradients, on random shapes (odd channel counts, non-square kernels,
// stride and padding, batch 1), once per build of the kernel (baseline AVX2 and AVX-512: the
// latter skipped on a CPU without it) and on 1 and 2 threads. Then the cases where the direct
// path must decline (strided input gradient: then the direct forward's gradients come from
// im2col + GEMM, which the random strided cases exercise) and the setting's parsing.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/error.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "tests/backend_test_util.h"
#include "tests/thread_count_scope.h"

using namespace dplab;
using namespace dplab::test;

namespace {

struct ConvScope {  // the algorithm and the ISA for one block, put back afterwards
  ConvAlgorithm algo_before = conv_algorithm();
  GemmIsa isa_before = gemm_isa();
  ConvScope(ConvAlgorithm a, GemmIsa isa) {
    set_conv_algorithm(a);
    set_gemm_isa(isa);
  }
  ~ConvScope() {
    set_conv_algorithm(algo_before);
    set_gemm_isa(isa_before);
  }
};

struct Case {
  int64_t N, C, H, W, O, kh, kw, stride, pad;
  bool bias, x_grad;
};

// y, dx, dW, db of sum(conv2d(x, W, b) * R) under the current settings.
std::vector<std::vector<float>> run_conv(const Case& c, uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({c.N, c.C, c.H, c.W}, {}, &gen).detach();
  Tensor w = randn({c.O, c.C, c.kh, c.kw}, {}, &gen).detach();
  Tensor b = randn({c.O}, {}, &gen).detach();
  x.requires_grad_(c.x_grad);
  w.requires_grad_(true);
  b.requires_grad_(true);
  Tensor y = conv2d(x, w, c.bias ? b : Tensor(), c.stride, c.pad);
  Tensor r = randn(y.shape(), {}, &gen);
  y.backward(r);
  std::vector<std::vector<float>> out{y.to_vector<float>(), w.grad().to_vector<float>()};
  if (c.x_grad) out.push_back(x.grad().to_vector<float>());
  if (c.bias) out.push_back(b.grad().to_vector<float>());
  return out;
}

void check_direct_equals_im2col(const Case& c, GemmIsa isa, uint64_t seed) {
  std::vector<std::vector<float>> ref, got;
  {
    ConvScope scope(ConvAlgorithm::Im2col, isa);
    ref = run_conv(c, seed);
  }
  {
    ConvScope scope(ConvAlgorithm::Direct, isa);
    got = run_conv(c, seed);
  }
  REQUIRE(got.size() == ref.size());
  const char* what[] = {"y", "dW", c.x_grad ? "dx" : "db", "db"};
  for (size_t k = 0; k < ref.size(); ++k) {
    CAPTURE(what[k]);
    // sums of up to C*kh*kw (or N*oh*ow) products of N(0, 1) values, in another order
    check_all_close(got[k], ref[k], 1e-3, 1e-4);
  }
}

std::vector<Case> random_cases(uint32_t seed, int count) {
  std::mt19937 gen(seed);
  auto pick = [&gen](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  // x: [N, C, H, W], weight: [O, C, kh, kw], one case to a row
  // clang-format off
  std::vector<Case> cases = {
    // N  C   H   W   O   kh  kw  stride  pad  bias   x_grad
      {3, 1,  28, 28, 16, 5,  5,  1,      2,   true,  false},  // LeNet conv1
      {2, 16, 14, 14, 32, 5,  5,  1,      2,   true,  true},   // LeNet conv2
      {1, 3,  7,  9,  5,  3,  2,  1,      1,   false, true},   // batch 1, odd
      {2, 7,  9,  8,  33, 3,  3,  2,      1,   true,  false},  // strided, O past a block
      {2, 17, 6,  31, 3,  1,  1,  1,      0,   true,  true},   // 1x1, wide rows
  };
  // clang-format on
  for (int k = 0; k < count; ++k) {
    Case c{.N = pick(1, 3),
           .C = pick(1, 19),
           .H = pick(3, 12),
           .W = pick(3, 20),
           .O = pick(1, 40),
           .kh = pick(1, 4),
           .kw = pick(1, 4),
           .stride = pick(1, 2),
           .pad = 0,
           .bias = pick(0, 1) == 1,
           .x_grad = true};
    c.pad = pick(0, static_cast<int>(std::min(c.kh, c.kw)) - 1);
    c.kh = std::min(c.kh, c.H + 2 * c.pad);
    c.kw = std::min(c.kw, c.W + 2 * c.pad);
    cases.push_back(c);
  }
  return cases;
}

void check_all_cases(GemmIsa isa) {
  for (int threads : {1, 2}) {
    testing::ThreadCountScope scope(threads);
    if (!scope.available()) continue;
    uint64_t seed = 100;
    for (const Case& c : random_cases(7, 12)) {
      CAPTURE(threads);
      CAPTURE(c.N);
      CAPTURE(c.C);
      CAPTURE(c.H);
      CAPTURE(c.W);
      CAPTURE(c.O);
      CAPTURE(c.kh);
      CAPTURE(c.kw);
      CAPTURE(c.stride);
      CAPTURE(c.pad);
      CAPTURE(c.bias);
      check_direct_equals_im2col(c, isa, seed++);
    }
  }
}

}  // namespace

TEST_CASE("direct conv2d equals im2col + GEMM: output and gradients, baseline (AVX2) kernel") {
  check_all_cases(GemmIsa::Baseline);
}

TEST_CASE("direct conv2d equals im2col + GEMM: output and gradients, AVX-512 kernel" *
          doctest::skip(!gemm_isa_available(GemmIsa::Avx512))) {
  check_all_cases(GemmIsa::Avx512);
}

TEST_CASE("the direct path declines what it does not compute, and the backend says so") {
  ConvScope scope(ConvAlgorithm::Direct, gemm_isa());
  const Window2d strided{.N = 1,
                         .C = 2,
                         .H = 6,
                         .W = 6,
                         .kh = 3,
                         .kw = 3,
                         .stride = 2,
                         .pad = 1,
                         .out_h = 3,
                         .out_w = 3};
  std::vector<float> x(72, 1.0f), w(36, 1.0f), gy(18, 1.0f), gx(72), gw(36);
  // forward and the weight gradient of a strided convolution run; its input gradient does not
  CHECK(cpu().conv2d_direct_backward(gy.data(), x.data(), w.data(), strided, 2, nullptr, gw.data(),
                                     nullptr));
  CHECK_FALSE(cpu().conv2d_direct_backward(gy.data(), x.data(), w.data(), strided, 2, gx.data(),
                                           gw.data(), nullptr));
  set_conv_algorithm(ConvAlgorithm::Im2col);
  std::vector<float> y(18);
  CHECK_FALSE(cpu().conv2d_direct(x.data(), w.data(), nullptr, strided, 2, y.data()));
}

TEST_CASE("DPLAB_CONV's values parse, and anything else is refused by name") {
  CHECK(parse_conv_algorithm("direct") == ConvAlgorithm::Direct);
  CHECK(parse_conv_algorithm("im2col") == ConvAlgorithm::Im2col);
  CHECK(std::string(conv_algorithm_name(ConvAlgorithm::Direct)) == "direct");
  CHECK_THROWS_WITH_AS(parse_conv_algorithm("winograd"),
                       doctest::Contains("expected 'direct' or 'im2col', got 'winograd'"), Error);
}
