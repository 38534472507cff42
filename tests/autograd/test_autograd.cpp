// Autograd: backward, accumulation, retain_graph, detach, no_grad, hooks and their order,
// end-of-backward callbacks, and the engine freeing what it no longer needs.
#include <doctest/doctest.h>

#include <thread>

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"

using namespace dplab;

namespace {
Tensor leaf(std::vector<float> v) {
  Tensor t = from_vector(v, {static_cast<int64_t>(v.size())});
  t.requires_grad_(true);
  return t;
}
}  // namespace

TEST_CASE("backward of y = sum(x^2 + 3x) is 2x + 3") {
  Tensor x = leaf({1, -2, 0.5f});
  Tensor y = (x * x + x * 3.0f).sum();
  y.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, -1, 4});
  CHECK(y.grad_fn() != nullptr);
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
}

TEST_CASE("gradients accumulate across backward calls until zeroed") {
  Tensor x = leaf({1, 2});
  (x * 2.0f).sum().backward();
  (x * 3.0f).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, 5});
  x.set_grad({});
  (x * 4.0f).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{4, 4});
}

TEST_CASE("a tensor used twice receives the sum of both paths") {
  Tensor x = leaf({3});
  Tensor y = x * x;          // dy/dx = 2x = 6
  Tensor z = (y + x).sum();  // dz/dx = 6 + 1
  z.backward();
  CHECK(x.grad().item() == 7.0f);
}

TEST_CASE("a non-scalar output needs an explicit gradient") {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0f;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("shape [2]"), Error);
  y.backward(from_vector(std::vector<float>{1, 10}, {2}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 20});
  CHECK_THROWS_WITH_AS(ones({2}).sum().backward(), doctest::Contains("does not require grad"),
                       Error);
}

TEST_CASE("a freed graph cannot be reused; retain_graph keeps it") {
  Tensor x = leaf({2});
  Tensor y = (x * x).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item() == 8.0f);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("retain_graph=true"), Error);
}

TEST_CASE("detach cuts the graph and no_grad records nothing") {
  Tensor x = leaf({2});
  Tensor d = (x * 3.0f).detach();
  CHECK_FALSE(d.requires_grad());
  Tensor y = (x * d).sum();  // d is a constant 6
  y.backward();
  CHECK(x.grad().item() == 6.0f);
  {
    NoGradGuard g;
    Tensor z = x * 2.0f;
    CHECK_FALSE(z.requires_grad());
    CHECK(z.grad_fn() == nullptr);
  }
  CHECK(grad_enabled());
}

TEST_CASE("grad mode is per thread") {
  NoGradGuard g;
  bool other_thread_enabled = false;
  std::thread t([&] { other_thread_enabled = grad_enabled(); });
  t.join();
  CHECK(other_thread_enabled);
  CHECK_FALSE(grad_enabled());
}

TEST_CASE("tensor hooks see and may replace the gradient") {
  Tensor x = leaf({1, 1});
  Tensor y = x * 2.0f;
  std::vector<float> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<float>();
    return g * 10.0f;  // replaces dL/dy
  });
  int leaf_calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++leaf_calls;
    return Tensor();  // keeps it
  });
  y.sum().backward();
  CHECK(seen == std::vector<float>{1, 1});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{20, 20});
  CHECK(leaf_calls == 1);
}

TEST_CASE(
    "post-accumulate hooks fire once per backward, in reverse order of use, before callbacks") {
  Tensor w1 = leaf({1}), w2 = leaf({2}), w3 = leaf({3});
  std::vector<std::string> order;
  w1.register_post_accumulate_grad_hook(
      [&](Tensor& p) { order.push_back("w1=" + std::to_string((int)p.grad().item())); });
  w2.register_post_accumulate_grad_hook(
      [&](Tensor& p) { order.push_back("w2=" + std::to_string((int)p.grad().item())); });
  w3.register_post_accumulate_grad_hook(
      [&](Tensor& p) { order.push_back("w3=" + std::to_string((int)p.grad().item())); });
  Tensor x = from_vector(std::vector<float>{1}, {1});
  // forward uses w1, then w2 twice, then w3: backward finishes w3 first, w1 last
  Tensor h = x * w1;
  h = h * w2 + h * w2;
  h = h * w3;
  w1.register_hook([&](const Tensor& g) {
    queue_backward_callback([&] { order.push_back("callback"); });
    return Tensor();
  });
  h.sum().backward();
  // d/dw3 = 2*w1*w2 = 4; d/dw2 = 2*w1*w3 = 6; d/dw1 = 2*w2*w3 = 12
  CHECK(order == std::vector<std::string>{"w3=4", "w2=6", "w1=12", "callback"});
  order.clear();
  (x * w2).sum().backward();  // accumulates: 6 + 1
  CHECK(order == std::vector<std::string>{"w2=7"});
  CHECK_THROWS_AS(queue_backward_callback([] {}), Error);
}

TEST_CASE("the engine frees saved tensors and gradient buffers as it goes") {
  Device d("cpu:9");
  Tensor x = ones({1 << 16}, {.device = d});
  x.requires_grad_(true);
  int64_t base = memory_stats(d).allocated_bytes;
  Tensor loss;
  {
    Tensor h = x;
    for (int i = 0; i < 4; ++i) h = exp(h * 0.1f);  // each exp saves its 256 KiB output
    loss = h.sum();
  }
  int64_t with_graph = memory_stats(d).allocated_bytes;
  CHECK(with_graph - base >= 4 * (256 << 10));
  reset_peak_memory_stats(d);
  loss.backward();
  int64_t after = memory_stats(d).allocated_bytes;
  // only the loss itself and x.grad remain
  CHECK(after - base <= (256 << 10) + 64);
  // the peak during backward stayed below graph + all gradients at once
  CHECK(memory_stats(d).peak_bytes < with_graph + 3 * (256 << 10));
}

TEST_CASE("retain_grad keeps a non-leaf gradient") {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3.0f;
  y.retain_grad();
  (y * y).sum().backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{6, 12});
}
