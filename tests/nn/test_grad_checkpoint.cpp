// Gradient checkpointing: gradients bitwise equal to no checkpointing (with dropout, whose masks
// the recomputation must redraw identically), for 0..L segments and for checkpoint(fn, a, b);
// fn runs once more per step; the peak memory of a deep MLP falls as its shapes predict.
#include <doctest/doctest.h>

#include "framework/nn/grad_checkpoint.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "models/mlp.h"

using namespace dplab;

namespace {

// depth x (Linear(width, width), ReLU, Dropout(0.2)), then Linear(width, 3): 3*depth+1 children.
std::shared_ptr<nn::Sequential> deep_mlp(int depth, int64_t width, Device d = Device("cpu")) {
  manual_seed(7);
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < depth; ++i) {
    seq->push_back(std::make_shared<nn::Linear>(width, width));
    seq->push_back(std::make_shared<nn::ReLU>());
    seq->push_back(std::make_shared<nn::Dropout>(0.2));
  }
  seq->push_back(std::make_shared<nn::Linear>(width, 3));
  seq->to(d);
  return seq;
}

struct Grads {
  float loss;
  std::vector<std::vector<float>> params;
  std::vector<float> x;
  float next_draw;  // the generator after the step: checkpointing must not disturb it
};

Grads step(nn::Sequential& seq, int segments) {
  Generator data(3);
  Tensor x = randn({5, 8}, {}, &data).requires_grad_();
  Tensor y = randn({5, 3}, {}, &data);
  manual_seed(11);  // the dropout masks
  Tensor loss = mse_loss(checkpoint_sequential(seq, segments, x), y);
  for (const Tensor& p : seq.parameters()) p.impl().grad.reset();
  loss.backward();
  Grads g{loss.item(), {}, x.grad().to_vector<float>(), randn({1}).item()};
  for (const Tensor& p : seq.parameters()) g.params.push_back(p.grad().to_vector<float>());
  return g;
}

}  // namespace

TEST_CASE(
    "checkpoint_sequential: gradients exactly those without checkpointing, dropout included") {
  auto seq = deep_mlp(4, 8);
  const Grads plain = step(*seq, 0);
  for (int segments : {1, 2, 3, 4, 13}) {
    CAPTURE(segments);
    const Grads ck = step(*seq, segments);
    CHECK(ck.loss == plain.loss);
    CHECK(ck.params == plain.params);  // bitwise
    CHECK(ck.x == plain.x);
    CHECK(ck.next_draw == plain.next_draw);
  }
  // without restoring the random state the recomputed masks differ, and so do the gradients
  Generator data(3);
  Tensor x = randn({5, 8}, {}, &data);
  manual_seed(11);
  Tensor out =
      checkpoint([&](const std::vector<Tensor>& in) { return seq->forward(in[0]); }, {x}, false);
  out.sum().backward();
  const std::vector<float> unrestored = seq->parameters()[0].grad().to_vector<float>();
  for (const Tensor& p : seq->parameters()) p.impl().grad.reset();
  manual_seed(11);
  checkpoint([&](const std::vector<Tensor>& in) { return seq->forward(in[0]); }, {x})
      .sum()
      .backward();
  CHECK(seq->parameters()[0].grad().to_vector<float>() != unrestored);
}

TEST_CASE("checkpoint(fn, a, b): two inputs, fn recomputed once in backward, same gradients") {
  Generator g(5);
  Tensor w = randn({4, 4}, {}, &g).requires_grad_();
  int calls = 0;
  auto fn = [&](const Tensor& a, const Tensor& b) {
    ++calls;
    return sum(mul(relu(matmul(a, w)), b.exp()));
  };
  auto run = [&](bool ck) {
    Tensor a = randn({3, 4}, {}, &g).requires_grad_(), b = randn({3, 4}, {}, &g).requires_grad_();
    w.impl().grad.reset();
    Tensor loss = ck ? checkpoint(fn, a, b) : fn(a, b);
    loss.backward();
    return std::vector<std::vector<float>>{a.grad().to_vector<float>(),
                                           b.grad().to_vector<float>(),
                                           w.grad().to_vector<float>(),
                                           {loss.item()}};
  };
  g.manual_seed(9);
  auto plain = run(false);
  CHECK(calls == 1);
  g.manual_seed(9);
  auto ck = run(true);
  CHECK(calls == 3);  // forward, then again in backward
  CHECK(ck == plain);
  CHECK_THROWS_WITH_AS(
      checkpoint_sequential(*deep_mlp(1, 4), 5, randn({2, 4})),
      doctest::Contains("segments must be in [0, 4] (the Sequential's 4 children), got 5"), Error);
}

TEST_CASE(
    "checkpoint_sequential: a deep MLP's peak activation memory falls as its shapes predict") {
  // 16 blocks of Linear(256, 256) + ReLU, batch 128: each block saves its input (for dW) and
  // the ReLU its output, 2 tensors of B x W floats ("act", 128 KiB) per block. The gradients
  // exist already (a first step made them; backward adds into them), so the peak above the
  // starting point is activations and backward's transient buffers.
  const int depth = 16;
  const int64_t batch = 128, width = 256, act = batch * width * 4;
  const Device d("cpu:9");
  manual_seed(1);
  auto seq = models::linear_relu_stack(depth, width);
  seq->to(d);
  Tensor x = randn({batch, width}).to(d);
  checkpoint_sequential(*seq, 0, x).sum().backward();  // allocates the gradients
  auto peak_of = [&](int segments) {
    const int64_t base = memory_stats(d).allocated_bytes;
    reset_peak_memory_stats(d);
    checkpoint_sequential(*seq, segments, x).sum().backward();
    return memory_stats(d).peak_bytes - base;
  };
  const int64_t p0 = peak_of(0), p2 = peak_of(2), p4 = peak_of(4);
  MESSAGE("peak activation bytes: 0 segments ", p0, ", 2 segments ", p2, ", 4 segments ", p4,
          " (act = ", act, ")");
  // The prediction in acts: no checkpointing keeps all 2L (32); S segments of L/S blocks keep
  // S-1 segment inputs, then one segment's 2L/S at a time: S-1 + 2L/S (S = 2: 17, S = 4: 11).
  // Backward adds a few act-sized buffers on top (gradients in flight: measured 3, and 4 with
  // a recomputed segment's output), and some bytes (the loss).
  auto predicted = [&](int s) { return s == 0 ? 2 * depth : s - 1 + 2 * depth / s; };
  for (auto [s, p] : {std::pair{0, p0}, {2, p2}, {4, p4}}) {
    CAPTURE(s);
    CHECK(p >= predicted(s) * act);
    CHECK(p <= (predicted(s) + 4) * act + 4096);
  }
  CHECK(p2 < p0);
  CHECK(p4 < p2);
}
