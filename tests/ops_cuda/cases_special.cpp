// cases_special.cpp: parity checks that do not fit "one op on fixed inputs": factories
// (values drawn from a generator on the host), dropout (a random mask), ops given tensors
// on two devices (must throw, naming both), and the fused optimizer steps over several
// steps with their state. Each takes the device under test; the reference is cpu:0.
// Read next: train_parity.cpp.
#include <doctest/doctest.h>

#include <string>

#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "tests/ops_cuda/parity.h"

namespace dplab::parity {
namespace {

const Device kCpu("cpu");

// Each pair of tensors must agree exactly and the tested one must be on d.
void check_made_on(Device d, const std::string& what, const Tensor& got, const Tensor& ref) {
  CHECK_MESSAGE(got.device() == d, what << " is on " << got.device().str());
  check_close(got, ref, what, {}, true);
}

// CHECK that f throws a dplab::Error saying "different devices" and naming both.
template <typename F>
void expect_device_error(const char* what, Device other, F f) {
  try {
    f();
    FAIL_CHECK(what << ": mixing cpu:0 and " << other.str() << " did not throw");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find("different devices") != std::string::npos, what << ": " << msg);
    CHECK_MESSAGE(msg.find("cpu:0") != std::string::npos, what << ": " << msg);
    CHECK_MESSAGE(msg.find(other.str()) != std::string::npos, what << ": " << msg);
  }
}

}  // namespace

std::vector<std::string> special_covers() {
  return {"zeros", "ones", "full",    "arange",  "from_vector", "zeros_like",       "ones_like",
          "randn", "rand", "uniform", "randint", "randperm",    "broadcast_shapes", "dropout"};
}

void check_factories(Device d) {
  check_made_on(d, "zeros", zeros({3, 37}, {.device = d}), zeros({3, 37}));
  check_made_on(d, "ones", ones({257}, {.device = d}), ones({257}));
  check_made_on(d, "full f32", full({5, 7}, 2.5, {.device = d}), full({5, 7}, 2.5));
  check_made_on(d, "full i64", full({9}, -3, {.dtype = DType::Int64, .device = d}),
                full({9}, -3, {.dtype = DType::Int64}));
  check_made_on(d, "arange(7)", arange(7, {.device = d}), arange(7));
  check_made_on(d, "arange(2, 20, 3) i64", arange(2, 20, 3, {.dtype = DType::Int64, .device = d}),
                arange(2, 20, 3, {.dtype = DType::Int64}));
  check_made_on(d, "arange(5, -4, -2)", arange(5, -4, -2, {.device = d}), arange(5, -4, -2));
  const std::vector<float> vf{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1.0f};
  const std::vector<int64_t> vi{4, -9, 0, 12};
  check_made_on(d, "from_vector f32", from_vector(vf, {2, 3}, {.device = d}),
                from_vector(vf, {2, 3}));
  check_made_on(d, "from_vector i64", from_vector(vi, {4}, {.device = d}), from_vector(vi, {4}));
  Tensor on_d = randn({4, 6}, {.device = d});
  check_made_on(d, "zeros_like", zeros_like(on_d), zeros({4, 6}));
  check_made_on(d, "ones_like", ones_like(on_d), ones({4, 6}));
  // One seed, the same numbers on every device: values are drawn on the host.
  Generator g1(42), g2(42);
  check_made_on(d, "randn", randn({33, 3}, {.device = d}, &g1), randn({33, 3}, {}, &g2));
  check_made_on(d, "rand", rand({101}, {.device = d}, &g1), rand({101}, {}, &g2));
  check_made_on(d, "uniform", uniform({7, 7}, -3.0f, 5.0f, {.device = d}, &g1),
                uniform({7, 7}, -3.0f, 5.0f, {}, &g2));
  check_made_on(d, "randint", randint(-5, 17, {45}, {.device = d}, &g1),
                randint(-5, 17, {45}, {}, &g2));
  // randperm is made on the CPU (it indexes host datasets); moved to d it is unchanged.
  check_made_on(d, "randperm", randperm(50, &g1).to(d), randperm(50, &g2));
  // broadcast_shapes has no kernel: the same answer whatever the device, checked once here.
  CHECK(broadcast_shapes({3, 1, 5}, {4, 1}) == Shape{3, 4, 5});
}

void check_dropout(Device d) {
  // Same seed, same mask on the CPU and on d (nn_norm.cpp draws it on the host).
  V in_cpu = make_inputs({x({37, 29})}, kCpu, 3), in_d = make_inputs({x({37, 29})}, d, 3);
  Generator g_cpu(5), g_d(5);
  Tensor y_cpu = dropout(in_cpu[0], 0.3f, true, &g_cpu), y_d = dropout(in_d[0], 0.3f, true, &g_d);
  check_close(y_d, y_cpu, "dropout output", {}, false);
  CHECK(y_d.device() == d);
  Tensor w = randn({37, 29});
  sum(mul(y_cpu, w)).backward();
  sum(mul(y_d, w.to(d))).backward();
  check_close(in_d[0].grad(), in_cpu[0].grad(), "dropout gradient (the mask times w)", {}, false);

  // A seed reproduces itself on d; another seed gives another mask.
  Tensor big = ones({256, 1031}, {.device = d});
  Generator a(11), b(11), c(12);
  Tensor ya = dropout(big, 0.3f, true, &a), yb = dropout(big, 0.3f, true, &b);
  check_close(yb, ya, "dropout reproduced from its seed", {}, true);
  CHECK(sum(eq(ya, dropout(big, 0.3f, true, &c))).item() < static_cast<float>(big.numel()));

  // Statistics: a fraction p of zeros, the rest scaled to 1/(1-p), so the mean stays ~1.
  const float n = static_cast<float>(big.numel());
  const float zeros_frac = sum(eq(ya, zeros_like(ya))).item() / n;
  const float scale = 1.0f / (1.0f - 0.3f);  // as dropout computes it, to the last bit
  const float kept_scaled = sum(eq(ya, full(ya.shape(), scale, ya.options()))).item() / n;
  CHECK(zeros_frac == doctest::Approx(0.3).epsilon(0.03));
  CHECK(zeros_frac + kept_scaled == doctest::Approx(1.0));
  CHECK(mean(ya).item() == doctest::Approx(1.0).epsilon(0.02));

  // Identity in eval and for p = 0: the same tensor comes back.
  CHECK(dropout(in_d[0], 0.5f, false, &a).is_same(in_d[0]));
  CHECK(dropout(in_d[0], 0.0f, true, &a).is_same(in_d[0]));
}

void check_mixed_devices(Device other) {
  Tensor a = randn({4, 5}), b = randn({4, 5}).to(other);
  Tensor i_other = from_vector(std::vector<int64_t>{0, 2, 1, 3}, {4}, {.device = other});
  Tensor img = randn({1, 2, 6, 6}), w_other = randn({3, 2, 3, 3}).to(other);
  expect_device_error("add", other, [&] { add(a, b); });
  expect_device_error("sub", other, [&] { sub(b, a); });
  expect_device_error("mul", other, [&] { mul(a, b); });
  expect_device_error("div", other, [&] { div(a, b); });
  expect_device_error("pow", other, [&] { pow(a, b); });
  expect_device_error("maximum", other, [&] { maximum(a, b); });
  expect_device_error("eq", other, [&] { eq(a, b); });
  expect_device_error("matmul", other, [&] { matmul(a, transpose(b, 0, 1)); });
  expect_device_error("linear weight", other, [&] { linear(a, b); });
  expect_device_error("linear bias", other, [&] {
    linear(a, randn({3, 5}), randn({3}).to(other));
  });
  expect_device_error("cat", other, [&] { cat({a, b}); });
  expect_device_error("stack", other, [&] { stack({a, b}); });
  expect_device_error("index_select", other, [&] { index_select(a, i_other); });
  expect_device_error("gather", other, [&] {
    gather(a, from_vector(std::vector<int64_t>(20, 1), {4, 5}, {.device = other}));
  });
  expect_device_error("nll_loss", other, [&] { nll_loss(a, i_other); });
  expect_device_error("cross_entropy", other, [&] { cross_entropy(a, i_other); });
  expect_device_error("mse_loss", other, [&] { mse_loss(a, b); });
  expect_device_error("conv2d weight", other, [&] { conv2d(img, w_other); });
  expect_device_error("conv2d bias", other, [&] {
    conv2d(img, randn({3, 2, 3, 3}), randn({3}).to(other));
  });
  expect_device_error("batch_norm weight", other, [&] {
    batch_norm(img, {}, {}, randn({2}).to(other), {}, true, 0.1f, 1e-5f);
  });
  expect_device_error("Tensor::add_", other, [&] { Tensor(a.detach()).add_(b); });
}

namespace {

// Three steps of Opt from the same start and gradients on cpu and on d.
template <typename Opt, typename Options>
void optimizer_parity(const std::string& what, Options options, Device d, bool exact) {
  INFO("optimizer: " << what);
  const std::vector<In> shapes{x({1031}), x({7, 13})};
  V p_cpu = make_inputs(shapes, kCpu, 8), p_d = make_inputs(shapes, d, 8);
  Opt o_cpu(p_cpu, options), o_d(p_d, options);
  Generator gen(9);
  const Tol tol{1e-5, 1e-5};
  for (int step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < p_cpu.size(); ++i) {
      Tensor g = randn(p_cpu[i].shape(), {}, &gen);
      p_cpu[i].set_grad(g);
      p_d[i].set_grad(g.to(d));
    }
    o_cpu.step();
    o_d.step();
    for (std::size_t i = 0; i < p_cpu.size(); ++i) {
      check_close(p_d[i], p_cpu[i],
                  what + ": param " + std::to_string(i) + " after step " + std::to_string(step),
                  tol, exact);
    }
  }
  StateDict s_cpu, s_d;
  Metadata m_cpu, m_d;
  o_cpu.state_dict(s_cpu, m_cpu);
  o_d.state_dict(s_d, m_d);
  REQUIRE(s_cpu.keys() == s_d.keys());
  for (const std::string& k : s_cpu.keys()) {
    CHECK_MESSAGE(s_d.at(k).device() == d, what << ": state " << k << " is not on " << d.str());
    check_close(s_d.at(k), s_cpu.at(k), what + ": state " + k, tol, exact);
  }
}

}  // namespace

void check_optimizers(Device d, bool exact) {
  using optim::SGD, optim::SGDOptions, optim::Adam, optim::AdamOptions, optim::AdamW,
      optim::AdamWOptions;
  optimizer_parity<SGD>("SGD", SGDOptions{.lr = 0.1}, d, exact);
  optimizer_parity<SGD>("SGD momentum", SGDOptions{.lr = 0.1, .momentum = 0.9}, d, exact);
  optimizer_parity<SGD>("SGD momentum dampening",
                        SGDOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3}, d, exact);
  optimizer_parity<SGD>(
      "SGD nesterov weight decay",
      SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}, d, exact);
  optimizer_parity<SGD>("SGD weight decay", SGDOptions{.lr = 0.1, .weight_decay = 0.1}, d, exact);
  optimizer_parity<Adam>("Adam", AdamOptions{.lr = 0.01}, d, exact);
  optimizer_parity<Adam>("Adam weight decay", AdamOptions{.lr = 0.01, .weight_decay = 0.1}, d,
                         exact);
  optimizer_parity<AdamW>("AdamW", AdamWOptions{.lr = 0.01}, d, exact);
  optimizer_parity<AdamW>("AdamW betas",
                          AdamWOptions{.lr = 0.003, .betas = {0.8, 0.99}, .weight_decay = 0.1}, d,
                          exact);
}

}  // namespace dplab::parity
