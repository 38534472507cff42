// Tutorial 01: tensors and autograd.
// What you will learn: how a tensor is made and viewed, where it lives and how its memory is
// counted, and how autograd computes gradients: requires_grad, backward, accumulation,
// detach and no_grad. Read 01_tensors_and_autograd.md beside this file as you run it.
#include <fmt/core.h>

#include "framework/dplab.h"

using namespace dplab;

int main() {
  manual_seed(0);

  fmt::print("== 1. Tensors ==\n");
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  fmt::print("a = {}\n", a);
  Tensor v = a.reshape({3, 2});  // a view: same storage, new shape
  fmt::print("a.reshape({{3, 2}}) = {}\n", v);
  fmt::print("shares storage with a: {}\n", v.raw_data() == a.raw_data());
  fmt::print("a + 10 = {}\n", a + 10.0f);
  fmt::print("a * [1, 0, -1] (broadcast) = {}\n", a * from_vector(std::vector<float>{1, 0, -1}, {3}));

  fmt::print("\n== 2. Devices and memory ==\n");
  Device dev("cpu:1");
  int64_t before = memory_stats(dev).allocated_bytes;
  Tensor b = a.to(dev);
  fmt::print("b = a.to(\"cpu:1\") lives on {}; cpu:1 now holds {} more bytes (6 floats x 4 bytes)\n",
             b.device(), memory_stats(dev).allocated_bytes - before);

  fmt::print("\n== 3. requires_grad and backward ==\n");
  Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3});
  x.requires_grad_(true);
  Tensor y = (x * x).sum();  // y = x0^2 + x1^2 + x2^2
  fmt::print("y = sum(x^2) = {}   (grad_fn: {})\n", y.item(), y.grad_fn()->name());
  y.backward();
  fmt::print("dy/dx = 2x = {}\n", x.grad());

  fmt::print("\n== 4. Gradients accumulate ==\n");
  Tensor y2 = (x * 3.0f).sum();
  y2.backward();
  fmt::print("after a second backward of sum(3x): x.grad = 2x + 3 = {}\n", x.grad());
  x.set_grad({});  // what optimizer.zero_grad() does
  (x * 3.0f).sum().backward();
  fmt::print("after zeroing and the same backward again: x.grad = {}\n", x.grad());

  fmt::print("\n== 5. The graph is freed after backward ==\n");
  Tensor z = (x * x).sum();
  z.backward({}, /*retain_graph=*/true);
  z.backward();
  fmt::print("two backward calls with retain_graph on the first: x.grad = 3 + 2x + 2x = {}\n", x.grad());
  try {
    z.backward();
  } catch (const Error& e) {
    fmt::print("a third backward fails: {}\n", e.what());
  }

  fmt::print("\n== 6. detach and no_grad ==\n");
  x.set_grad({});
  Tensor c = (x * 2.0f).detach();  // a constant now: no gradient flows through it
  (x * c).sum().backward();
  fmt::print("d/dx sum(x * detach(2x)) = detach(2x) = {}\n", x.grad());
  {
    NoGradGuard no_grad;
    Tensor e = x * 2.0f;
    fmt::print("under NoGradGuard, x * 2 requires grad: {}\n", e.requires_grad());
  }
  fmt::print("outside it again: {}\n", (x * 2.0f).requires_grad());
  return 0;
}
