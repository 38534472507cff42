// Every op that takes float16 / bfloat16 against float32: the inputs are rounded to the
// 16-bit dtype once, the float32 reference runs on exactly those values, and the 16-bit
// result (and each input's gradient) must agree within a few units of the format's
// precision (float16 2^-11, bfloat16 2^-8 relative), measured against the largest
// reference value. Also: results and gradients keep the 16-bit dtype, and GEMMs sum in
// float32 (a sum that float16 accumulation would get wrong comes out right).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "framework/dplab.h"

using namespace dplab;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

double unit_roundoff(DType t) {
  return t == DType::Float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// max |a - r| / max |r|, both converted to float32
double relative_error(const Tensor& a, const Tensor& r) {
  std::vector<float> av = a.detach().to(DType::Float32).to_vector<float>();
  std::vector<float> rv = r.detach().to(DType::Float32).to_vector<float>();
  REQUIRE(av.size() == rv.size());
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < av.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(av[i] - rv[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(rv[i])));
  }
  return err / scale;
}

// Runs fn on 16-bit copies of `inputs` and on float32 copies of the same (rounded) values;
// compares outputs (k_fwd units of roundoff) and gradients of sum(out * w) (k_bwd units).
void check_op(const std::string& name, const Fn& fn, const std::vector<Tensor>& inputs,
              double k_fwd = 4, double k_bwd = 8, bool differentiable = true) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    CAPTURE(name);
    CAPTURE(dtype_name(t));
    std::vector<Tensor> low, ref;
    for (const Tensor& x : inputs) {
      if (x.dtype() != DType::Float32) {  // labels, indices: as they are
        low.push_back(x);
        ref.push_back(x);
        continue;
      }
      Tensor l = x.to(t);
      Tensor r = l.to(DType::Float32);
      if (differentiable) {
        l.requires_grad_();
        r.requires_grad_();
      }
      low.push_back(l);
      ref.push_back(r);
    }
    Tensor out_low = fn(low), out_ref = fn(ref);
    CHECK(out_low.dtype() == t);
    CHECK(out_low.shape() == out_ref.shape());
    const double u = unit_roundoff(t);
    CHECK(relative_error(out_low, out_ref) <= k_fwd * u);
    if (!differentiable) continue;
    Generator gen(3);
    Tensor w = randn(out_ref.shape(), {}, &gen);
    sum(mul(out_low.to(DType::Float32), w)).backward();
    sum(mul(out_ref, w)).backward();
    for (size_t i = 0; i < low.size(); ++i) {
      if (!low[i].requires_grad()) continue;
      CAPTURE(i);
      REQUIRE(low[i].grad().defined());
      CHECK(low[i].grad().dtype() == t);  // a 16-bit tensor's gradient is 16-bit
      CHECK(relative_error(low[i].grad(), ref[i].grad()) <= k_bwd * u);
    }
  }
}

Tensor rnd(const Shape& s, uint64_t seed, float scale = 1.0f) {
  Generator gen(seed);
  return mul_scalar(randn(s, {}, &gen), scale);
}

}  // namespace

TEST_CASE("16-bit elementwise ops against float32") {
  Tensor a = rnd({4, 5}, 1), b = rnd({4, 5}, 2), row = rnd({5}, 3);
  Tensor pos = add_scalar(abs(rnd({4, 5}, 4)), 0.5f);
  check_op("add", [](auto& in) { return add(in[0], in[1]); }, {a, b});
  check_op("sub broadcast", [](auto& in) { return sub(in[0], in[1]); }, {a, row});
  check_op("mul", [](auto& in) { return mul(in[0], in[1]); }, {a, b});
  check_op(
      "div", [](auto& in) { return div(in[0], in[1]); }, {a, pos}, 4, 16);
  check_op("maximum", [](auto& in) { return maximum(in[0], in[1]); }, {a, b});
  check_op("relu", [](auto& in) { return relu(in[0]); }, {a});
  check_op("sigmoid", [](auto& in) { return sigmoid(in[0]); }, {a});
  check_op("tanh", [](auto& in) { return tanh(in[0]); }, {a});
  check_op("exp", [](auto& in) { return exp(in[0]); }, {a});
  check_op(
      "log", [](auto& in) { return log(in[0]); }, {pos}, 4, 16);
  check_op("sqrt", [](auto& in) { return sqrt(in[0]); }, {pos});
  check_op(
      "pow", [](auto& in) { return pow(in[0], 3.0f); }, {a}, 4, 16);
  check_op("scalars", [](auto& in) { return add_scalar(mul_scalar(neg(in[0]), 2.5f), 1.0f); }, {a});
  check_op("abs", [](auto& in) { return abs(in[0]); }, {a});
}

TEST_CASE("16-bit reductions accumulate in float32") {
  Tensor a = rnd({6, 7, 3}, 5);
  check_op("sum", [](auto& in) { return sum(in[0]); }, {a});
  check_op("sum dims", [](auto& in) { return sum(in[0], {0, 2}); }, {a});
  check_op("mean", [](auto& in) { return mean(in[0], {1}, true); }, {a});
  check_op(
      "var", [](auto& in) { return var(in[0], {1}, true); }, {a}, 4, 16);
  check_op("max", [](auto& in) { return max(in[0]); }, {a});
  check_op("max dim", [](auto& in) { return max(in[0], 1).values; }, {a});
  // 4096 ones and one 0.5: a float16 accumulator would stop at 2048 (2048 + 1 rounds to
  // 2048); float32 accumulation gives 4096.5, rounded once to 4096 in float16.
  Tensor ones_and_half = cat({ones({4096}), full({1}, 0.5)});
  CHECK(sum(ones_and_half.to(DType::Float16)).item() == 4096.0f);
  CHECK(sum(ones_and_half.to(DType::BFloat16)).item() == 4096.0f);
  CHECK(argmax(a.to(DType::Float16), 1).dtype() == DType::Int64);
}

TEST_CASE("16-bit matmul and linear: float32 accumulation, one rounding") {
  Tensor a = rnd({9, 33}, 6), b = rnd({33, 7}, 7), b3 = rnd({2, 33, 7}, 8), a3 = rnd({2, 9, 33}, 9);
  check_op(
      "matmul", [](auto& in) { return matmul(in[0], in[1]); }, {a, b}, 2, 6);
  check_op(
      "matmul batched", [](auto& in) { return matmul(in[0], in[1]); }, {a3, b3}, 2, 6);
  check_op(
      "matmul shared b", [](auto& in) { return matmul(in[0], in[1]); }, {a3, b}, 2, 6);
  Tensor x = rnd({16, 33}, 10), w = rnd({8, 33}, 11, 0.2f), bias = rnd({8}, 12);
  check_op(
      "linear", [](auto& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias}, 4, 8);
  check_op(
      "linear no bias", [](auto& in) { return linear(in[0], in[1]); }, {x, w}, 2, 6);
  // 4096 products 1 * 1: a float16 accumulator stops at 2048 (2048 + 1 rounds back to 2048);
  // float32 accumulation gets 4096, which float16 holds exactly.
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Tensor ones_row = ones({1, 4096}).to(t), ones_col = ones({4096, 1}).to(t);
    CHECK(matmul(ones_row, ones_col).item() == 4096.0f);
  }
  CHECK_THROWS_WITH_AS(matmul(ones({2, 3}).to(DType::Float16), ones({4, 2}).to(DType::Float16)),
                       doctest::Contains("inner dims differ"), Error);
}

TEST_CASE("16-bit conv2d, pooling, softmax, losses, batch norm against float32") {
  Tensor x = rnd({3, 2, 7, 6}, 13), w = rnd({4, 2, 3, 3}, 14, 0.3f), b = rnd({4}, 15);
  check_op(
      "conv2d", [](auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); }, {x, w, b}, 4, 8);
  check_op(
      "conv2d stride 2", [](auto& in) { return conv2d(in[0], in[1], {}, 2, 0); }, {x, w}, 4, 8);
  check_op("max_pool2d", [](auto& in) { return max_pool2d(in[0], 2); }, {x});
  check_op("avg_pool2d", [](auto& in) { return avg_pool2d(in[0], 3, 2, 1); }, {x});
  Tensor logits = rnd({5, 10}, 16, 3.0f);
  Tensor labels = from_vector(std::vector<int64_t>{1, 0, 9, 3, 3}, {5});
  check_op("softmax", [](auto& in) { return softmax(in[0], 1); }, {logits});
  check_op("log_softmax", [](auto& in) { return log_softmax(in[0], 0); }, {logits});
  check_op("cross_entropy", [](auto& in) { return cross_entropy(in[0], in[1]); }, {logits, labels});
  check_op("mse_loss", [](auto& in) { return mse_loss(in[0], in[1]); }, {logits, rnd({5, 10}, 17)});
  Tensor gamma = add_scalar(rnd({2}, 18, 0.1f), 1.0f), beta = rnd({2}, 19, 0.1f);
  check_op(
      "batch_norm",
      [](auto& in) { return batch_norm(in[0], {}, {}, in[1], in[2], true, 0.1f, 1e-5f); },
      {x, gamma, beta}, 4, 16);
  check_op(
      "reshape/transpose/cat",
      [](auto& in) {
    return cat({transpose(reshape(in[0], {6, 42}), 0, 1), in[1]}, 0);
      },
      {x, rnd({1, 6}, 20)}, 1, 1);
}

TEST_CASE("mixed dtypes promote as in PyTorch; bad input is a clear error") {
  Tensor h = ones({2, 2}).to(DType::Float16), bf = ones({2, 2}).to(DType::BFloat16),
         f = ones({2, 2});
  CHECK(add(h, h).dtype() == DType::Float16);
  CHECK(add(h, f).dtype() == DType::Float32);
  CHECK(mul(h, bf).dtype() == DType::Float32);
  CHECK(matmul(h, f).dtype() == DType::Float32);
  // gradients come back in each input's own dtype
  Tensor hl = h.detach().requires_grad_(), fl = f.detach().requires_grad_();
  sum(mul(hl, fl)).backward();
  CHECK(hl.grad().dtype() == DType::Float16);
  CHECK(fl.grad().dtype() == DType::Float32);
  CHECK_THROWS_WITH_AS(Tensor::empty({2}, {.dtype = DType::Int64}).requires_grad_(),
                       doctest::Contains("only floating tensors"), Error);
  CHECK_THROWS_WITH_AS(h.to_vector<float>(), doctest::Contains("tensor is float16"), Error);
}
