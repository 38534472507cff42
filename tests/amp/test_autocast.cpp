// Autocast: the table of output dtypes of every op inside AutocastGuard (PyTorch's lists,
// ops/autocast.h), for float32 and 16-bit inputs; nothing changes outside the guard;
// gradients come back in the leaves' dtypes; guards nest and restore.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/dplab.h"
#include "framework/ops/autocast.h"

using namespace dplab;

namespace {

struct Row {
  std::string op;
  std::function<Tensor(const Tensor& x)> run;  // x: [4, 8] or [2, 1, 6, 6] (image ops)
  bool image;
  // expected output dtype inside autocast(low), for a float32 input and a `low` input;
  // "L" = the autocast dtype, "F" = float32
  const char* from_f32;
  const char* from_low;
};

Tensor w8() { return full({8, 8}, 0.1); }

std::vector<Row> table() {
  Tensor labels = from_vector(std::vector<int64_t>{0, 1, 2, 3}, {4});
  return {
      {"matmul", [](const Tensor& x) { return matmul(x, w8()); }, false, "L", "L"},
      {"linear", [](const Tensor& x) { return linear(x, w8(), zeros({8})); }, false, "L", "L"},
      {"conv2d",
       [](const Tensor& x) {
    return conv2d(x, full({3, 1, 3, 3}, 0.1), zeros({3}));
       },
       true, "L", "L"},
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }, false, "F", "F"},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 1); }, false, "F", "F"},
      {"cross_entropy", [labels](const Tensor& x) { return cross_entropy(x, labels); }, false, "F",
       "F"},
      {"nll_loss", [labels](const Tensor& x) { return nll_loss(x, labels); }, false, "F", "F"},
      {"mse_loss",
       [](const Tensor& x) {
    return mse_loss(x, zeros_like(x.detach().to(DType::Float32)).to(x.dtype()));
       },
       false, "F", "F"},
      {"batch_norm",
       [](const Tensor& x) {
    return batch_norm(x, {}, {}, ones({8}), zeros({8}), true, 0.1f, 1e-5f);
       },
       false, "F", "F"},
      {"sum", [](const Tensor& x) { return sum(x); }, false, "F", "F"},
      {"sum dims", [](const Tensor& x) { return sum(x, {1}); }, false, "F", "F"},
      {"mean", [](const Tensor& x) { return mean(x); }, false, "F", "F"},
      {"var", [](const Tensor& x) { return var(x, {1}, true); }, false, "F", "F"},
      {"exp", [](const Tensor& x) { return exp(x); }, false, "F", "F"},
      {"log", [](const Tensor& x) { return log(abs(x)); }, false, "F", "F"},
      {"pow", [](const Tensor& x) { return pow(x, 2.0f); }, false, "F", "F"},
      // not listed: run in the input's dtype
      {"relu", [](const Tensor& x) { return relu(x); }, false, "F", "L"},
      {"add", [](const Tensor& x) { return add(x, x); }, false, "F", "L"},
      {"mul_scalar", [](const Tensor& x) { return mul_scalar(x, 3.0f); }, false, "F", "L"},
      {"max_pool2d", [](const Tensor& x) { return max_pool2d(x, 2); }, true, "F", "L"},
      {"avg_pool2d", [](const Tensor& x) { return avg_pool2d(x, 2); }, true, "F", "L"},
      {"reshape", [](const Tensor& x) { return reshape(x, {-1}); }, false, "F", "L"},
      {"transpose", [](const Tensor& x) { return transpose(x, 0, 1); }, false, "F", "L"},
      {"max", [](const Tensor& x) { return max(x); }, false, "F", "L"},
      // two dtypes: promoted
      {"add(x, float32)",
       [](const Tensor& x) {
    return add(x, ones({4, 8}));
       },
       false, "F", "F"},
      };
}

}  // namespace

TEST_CASE("autocast: the output dtype of every op, for float16 and bfloat16") {
  for (DType low : {DType::Float16, DType::BFloat16}) {
    for (const Row& row : table()) {
      CAPTURE(row.op);
      CAPTURE(dtype_name(low));
      Generator gen(1);
      Tensor x32 = randn(row.image ? Shape{2, 1, 6, 6} : Shape{4, 8}, {}, &gen);
      Tensor xlow = x32.to(low);
      DType got_f32, got_low;
      {
        amp::AutocastGuard autocast(low);
        got_f32 = row.run(x32).dtype();
        got_low = row.run(xlow).dtype();
      }
      CHECK(dtype_name(got_f32) ==
            dtype_name(std::string(row.from_f32) == "L" ? low : DType::Float32));
      CHECK(dtype_name(got_low) ==
            dtype_name(std::string(row.from_low) == "L" ? low : DType::Float32));
      // outside the guard, float32 stays float32 everywhere
      CHECK(row.run(x32).dtype() == DType::Float32);
    }
  }
}

TEST_CASE("autocast: gradients reach float32 leaves in float32, and values match float32 closely") {
  Generator gen(2);
  Tensor x = randn({16, 32}, {}, &gen).requires_grad_();
  Tensor w = mul_scalar(randn({10, 32}, {}, &gen), 0.2f).requires_grad_();
  Tensor b = zeros({10}).requires_grad_();
  Tensor labels = randint(0, 10, {16}, {}, &gen);
  Tensor loss;
  {
    amp::AutocastGuard autocast(DType::BFloat16);
    Tensor logits = linear(x, w, b);
    CHECK(logits.dtype() == DType::BFloat16);
    loss = cross_entropy(logits, labels);
  }
  CHECK(loss.dtype() == DType::Float32);
  loss.backward();
  CHECK(w.grad().dtype() == DType::Float32);
  CHECK(x.grad().dtype() == DType::Float32);
  const std::vector<float> g_auto = w.grad().to_vector<float>();
  w.set_grad({});
  cross_entropy(linear(x, w, b), labels).backward();
  const std::vector<float> g_ref = w.grad().to_vector<float>();
  float err = 0, scale = 0;
  for (size_t i = 0; i < g_ref.size(); ++i) {
    err = std::max(err, std::fabs(g_auto[i] - g_ref[i]));
    scale = std::max(scale, std::fabs(g_ref[i]));
  }
  CHECK(err <= 0.05f * scale);  // bfloat16 inputs (2^-8 each), float32 accumulation
}

TEST_CASE("autocast guards nest, can be disabled inside, and restore") {
  CHECK(!amp::autocast_dtype());
  {
    amp::AutocastGuard outer(DType::Float16);
    CHECK(matmul(ones({2, 2}), ones({2, 2})).dtype() == DType::Float16);
    {
      amp::AutocastGuard off(DType::Float16, /*enabled=*/false);
      CHECK(matmul(ones({2, 2}), ones({2, 2})).dtype() == DType::Float32);
    }
    {
      amp::AutocastGuard inner(DType::BFloat16);
      CHECK(matmul(ones({2, 2}), ones({2, 2})).dtype() == DType::BFloat16);
    }
    CHECK(*amp::autocast_dtype() == DType::Float16);
  }
  CHECK(!amp::autocast_dtype());
  CHECK_THROWS_WITH_AS(amp::AutocastGuard(DType::Float32),
                       doctest::Contains("expected float16 or bfloat16"), Error);
}
