// test_sgd.cpp: SGD against updates computed by hand, two or three steps on a 2-element
// parameter p0 = [1, -2] with gradients g1 = [0.5, 1], g2 = [-1, 2], g3 = [2, 0] and lr 0.1;
// error checks; parameters without a gradient; zero_grad; state memory on cpu:k.
#include <doctest/doctest.h>

#include "framework/optim/sgd.h"
#include "framework/tensor/allocator.h"
#include "tests/optim/optim_test_util.h"

using namespace dplab;
using namespace dplab::optim_test;

TEST_CASE("SGD plain: p -= lr * g") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 0.1});
  // s1: [1 - 0.1*0.5, -2 - 0.1*1] = [0.95, -2.1]
  // s2: [0.95 + 0.1*1, -2.1 - 0.1*2] = [1.05, -2.3]
  run_steps(opt, p, {{0.95f, -2.1f}, {1.05f, -2.3f}});
}

TEST_CASE("SGD momentum 0.9: buf = 0.9 buf + g, p -= lr * buf") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  // s1: buf = g1 = [0.5, 1]                          p = [0.95, -2.1]
  // s2: buf = 0.9*[0.5, 1] + [-1, 2] = [-0.55, 2.9]  p = [0.95 + 0.055, -2.1 - 0.29] = [1.005, -2.39]
  // s3: buf = 0.9*[-0.55, 2.9] + [2, 0] = [1.505, 2.61]
  //                                                  p = [1.005 - 0.1505, -2.39 - 0.261] = [0.8545, -2.651]
  run_steps(opt, p, {{0.95f, -2.1f}, {1.005f, -2.39f}, {0.8545f, -2.651f}});
}

TEST_CASE("SGD dampening 0.5: buf = 0.9 buf + 0.5 g, but the first buf is g undamped") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  // s1: buf = g1 = [0.5, 1]                                  p = [0.95, -2.1]
  // s2: buf = 0.9*[0.5, 1] + 0.5*[-1, 2] = [-0.05, 1.9]      p = [0.955, -2.29]
  // s3: buf = 0.9*[-0.05, 1.9] + 0.5*[2, 0] = [0.955, 1.71]  p = [0.955 - 0.0955, -2.29 - 0.171]
  run_steps(opt, p, {{0.95f, -2.1f}, {0.955f, -2.29f}, {0.8595f, -2.461f}});
}

TEST_CASE("SGD nesterov: p -= lr * (g + 0.9 buf)") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  // s1: buf = [0.5, 1];     d = [0.5, 1] + 0.9*[0.5, 1] = [0.95, 1.9]      p = [0.905, -2.19]
  // s2: buf = [-0.55, 2.9]; d = [-1, 2] + 0.9*[-0.55, 2.9] = [-1.495, 4.61]
  //                                                   p = [0.905 + 0.1495, -2.19 - 0.461] = [1.0545, -2.651]
  run_steps(opt, p, {{0.905f, -2.19f}, {1.0545f, -2.651f}});
}

TEST_CASE("SGD weight decay 0.1: d = g + 0.1 p") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 0.1, .weight_decay = 0.1});
  // s1: d = [0.5 + 0.1, 1 - 0.2] = [0.6, 0.8]                p = [0.94, -2.08]
  // s2: d = [-1 + 0.094, 2 - 0.208] = [-0.906, 1.792]        p = [1.0306, -2.2592]
  run_steps(opt, p, {{0.94f, -2.08f}, {1.0306f, -2.2592f}});
}

TEST_CASE("SGD weight decay 0.1 AND momentum 0.9: the decay enters the buffer, d = g + 0.1 p; buf "
          "= 0.9 buf + d") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  // s1: d = [0.5 + 0.1, 1 - 0.2] = [0.6, 0.8] = buf              p = [0.94, -2.08]
  // s2: d = [-1 + 0.094, 2 - 0.208] = [-0.906, 1.792]
  //     buf = 0.9*[0.6, 0.8] + d = [-0.366, 2.512]               p = [0.9766, -2.3312]
  // s3: d = [2 + 0.09766, 0 - 0.23312] = [2.09766, -0.23312]
  //     buf = 0.9*[-0.366, 2.512] + d = [1.76826, 2.02768]      p = [0.799774, -2.533968]
  // (Decay added after the momentum, p -= lr (buf + 0.1 p), agrees at s1 and not after.)
  run_steps(opt, p, {{0.94f, -2.08f}, {0.9766f, -2.3312f}, {0.799774f, -2.533968f}});
}

TEST_CASE("SGD rejects bad options and bad parameters") {
  Tensor p = param({1, 2});
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = -0.1}), doctest::Contains("invalid lr"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .momentum = -0.5}),
                       doctest::Contains("invalid momentum"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .weight_decay = -1}),
                       doctest::Contains("invalid weight_decay"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .nesterov = true}),
                       doctest::Contains("nesterov"), Error);
  CHECK_THROWS_WITH_AS(
      optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
      doctest::Contains("zero dampening"), Error);
  Tensor not_leaf = p * 2.0f;
  CHECK_THROWS_WITH_AS(optim::SGD({not_leaf}, {.lr = 0.1}), doctest::Contains("not a leaf"), Error);
  Tensor labels = from_vector(std::vector<int64_t>{1, 2}, {2}, {.dtype = DType::Int64});
  CHECK_THROWS_WITH_AS(optim::SGD({labels}, {.lr = 0.1}), doctest::Contains("must be float32"),
                       Error);
  CHECK_THROWS_WITH_AS(optim::SGD({p, p}, {.lr = 0.1}), doctest::Contains("appears twice"), Error);
}

TEST_CASE("SGD skips parameters without a gradient; zero_grad clears them") {
  Tensor a = param({1, -2}), b = param({5, 6});
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, kGrads[0]);
  opt.step();
  check_close(a, {0.95f, -2.1f});
  check_close(b, {5, 6});  // no .grad: untouched, and no momentum buffer either
  StateDict sd;
  Metadata meta;
  opt.state_dict(sd, meta);
  CHECK(sd.contains("state.0.momentum_buffer"));
  CHECK_FALSE(sd.contains("state.1.momentum_buffer"));
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE(
    "zero_grad(set_to_none = false) zeroes .grad in place: the same storage, so views stay views") {
  Tensor p = param({1, -2});
  optim::SGD opt({p}, {.lr = 0.1});
  set_grad(p, kGrads[0]);
  const void* storage = p.grad().raw_data();
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(p.grad().defined());
  CHECK(p.grad().raw_data() == storage);
  CHECK(p.grad().to_vector<float>() == std::vector<float>{0, 0});
  Tensor q = param({3, 4});  // a parameter without a gradient keeps none
  optim::SGD opt2({q}, {.lr = 0.1});
  opt2.zero_grad(false);
  CHECK_FALSE(q.grad().defined());
}

TEST_CASE("SGD momentum buffers are allocated on the parameter's device") {
  // cpu:3 is a logical device with its own accounting; nothing else in this suite uses it.
  Device dev("cpu:3");
  Tensor p = param(std::vector<float>(1000, 1.0f), dev);
  set_grad(p, std::vector<float>(1000, 0.5f));
  optim::SGD plain({p}, {.lr = 0.1});
  int64_t before = memory_stats(dev).allocated_bytes;
  plain.step();
  CHECK(memory_stats(dev).allocated_bytes == before);  // plain SGD keeps no state
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  int64_t cpu0_before = memory_stats(Device("cpu:0")).allocated_bytes;
  opt.step();
  CHECK(memory_stats(dev).allocated_bytes - before == 1000 * 4);  // one float buffer
  CHECK(memory_stats(Device("cpu:0")).allocated_bytes == cpu0_before);
  opt.step();  // the buffer is reused, not reallocated
  CHECK(memory_stats(dev).allocated_bytes - before == 1000 * 4);
}
