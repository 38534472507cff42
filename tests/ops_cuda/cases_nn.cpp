// cases_nn.cpp: the parity tables of ops/nn_loss.cpp, ops/nn_conv.cpp and ops/nn_norm.cpp.
// Softmax rows are shorter and longer than a block of 256 threads; convolutions mix
// strides, paddings, kernel sizes and channel counts that are not powers of two; pooling
// windows overlap (stride < kernel) and hang over the padding; batch norm is checked in
// training (output, gradients and the running stats it updates in place) and in eval.
// Dropout, which draws a mask, is checked on its own in cases_special.cpp.
// Read next: cases_special.cpp.
#include "framework/tensor/random.h"
#include "tests/ops_cuda/parity.h"

namespace dplab::parity {

std::vector<OpCase> nn_cases() {
  std::vector<OpCase> t;
  // ---- softmax family over every dim ----
  for (int64_t d : {0, 1, -1}) {
    const std::string k = " dim " + std::to_string(d);
    // clang-format off
    //           name                        covers           inputs           f, tol
    t.push_back({"softmax [6,9,13]" + k,     {"softmax"},     {x({6, 9, 13})}, [d](const V& v) { return V{softmax(v[0], d)}; }, kSum});
    t.push_back({"log_softmax [6,9,13]" + k, {"log_softmax"}, {x({6, 9, 13})}, [d](const V& v) { return V{log_softmax(v[0], d)}; }, kSum});
    // clang-format on
  }
  // clang-format off
  //           name                                       covers           inputs          f, tol
  t.push_back({"softmax of rows of 1000 (several warps)", {"softmax"},     {x({5, 1000})}, [](const V& v) { return V{softmax(mul_scalar(v[0], 4.0f), -1)}; }, kSum});
  t.push_back({"log_softmax of large logits",             {"log_softmax"}, {x({3, 300})},  [](const V& v) { return V{log_softmax(mul_scalar(v[0], 40.0f), -1)}; }, kSum});
  t.push_back({"softmax of a [7] vector",                 {"softmax"},     {x({7})},       [](const V& v) { return V{softmax(v[0])}; }, kSum});
  // clang-format on

  // ---- losses, each reduction ----
  const std::pair<Reduction, const char*> reductions[] = {
      {Reduction::None, "none"}, {Reduction::Mean, "mean"}, {Reduction::Sum, "sum"}};
  for (const auto& [red, rn] : reductions) {
    const Reduction r = red;  // a plain variable: lambdas capture it by value
    // clang-format off
    //           name                                covers             inputs                        f, tol
    t.push_back({std::string("nll_loss ") + rn,      {"nll_loss"},      {x({37, 11}), idx({37}, 11)}, [r](const V& v) { return V{nll_loss(log_softmax(v[0], 1), v[1], r)}; }, kSum});
    t.push_back({std::string("cross_entropy ") + rn, {"cross_entropy"}, {x({37, 11}), idx({37}, 11)}, [r](const V& v) { return V{cross_entropy(v[0], v[1], r)}; }, kSum});
    t.push_back({std::string("mse_loss ") + rn,      {"mse_loss"},      {x({9, 35}), x({9, 35})},     [r](const V& v) { return V{mse_loss(v[0], v[1], r)}; }, kSum});
    // clang-format on
  }
  // clang-format off
  //           name                                  covers        inputs                        f, tol
  t.push_back({"nll_loss of raw scores",             {"nll_loss"}, {x({5, 300}), idx({5}, 300)}, [](const V& v) { return V{nll_loss(v[0], v[1])}; }, kSum});
  t.push_back({"mse_loss against a constant target", {"mse_loss"}, {x({33}), cst({33})},         [](const V& v) { return V{mse_loss(v[0], v[1])}; }, kSum});
  // clang-format on

  // ---- conv2d: x [N, C, H, W], weight [O, C, kh, kw], bias [O] ----
  struct Conv {
    Shape xs, ws;
    bool bias;
    int64_t stride, pad;
  };
  // clang-format off
  const Conv convs[] = {
    // xs              ws             bias   stride  pad
      {{2, 3, 11, 9},  {5, 3, 3, 3},  true,  1,      0},
      {{2, 3, 11, 9},  {5, 3, 3, 3},  true,  1,      1},
      {{2, 3, 11, 9},  {5, 3, 3, 3},  false, 2,      1},
      {{3, 2, 8, 8},   {4, 2, 5, 5},  true,  1,      2},  // LeNet's 5x5, padding 2
      {{1, 6, 7, 10},  {3, 6, 1, 1},  true,  1,      0},  // 1x1
      {{2, 4, 13, 13}, {7, 4, 3, 2},  true,  3,      2},  // a non-square kernel, stride 3
      {{4, 1, 28, 28}, {16, 1, 5, 5}, true,  1,      2},
  };
  // clang-format on
  for (const Conv& c : convs) {
    const std::string name = "conv2d x " + shape_str(c.xs) + " w " + shape_str(c.ws) + " stride " +
                             std::to_string(c.stride) + " pad " + std::to_string(c.pad) +
                             (c.bias ? "" : " no bias");
    std::vector<In> in{x(c.xs), x(c.ws)};
    if (c.bias) in.push_back(x({c.ws[0]}));
    t.push_back({name,
                 {"conv2d"},
                 in,
                 [c](const V& v) {
      return V{conv2d(v[0], v[1], c.bias ? v[2] : Tensor(), c.stride, c.pad)};
                 },
                 kGemm});
  }

  // ---- conv2d_relu_max_pool2d: fused on the CPU where it is direct (stride 1), the three
  // ops elsewhere (stride 2 here, and CUDA); odd sizes leave a row and a column unpooled ----
  // clang-format off
  const Conv fused[] = {
    // xs             ws            bias   stride  pad
      {{3, 2, 8, 8},  {4, 2, 5, 5}, true,  1,      2},  // LeNet's 5x5, padding 2
      {{2, 3, 11, 9}, {5, 3, 3, 3}, false, 1,      1},  // odd sizes, no bias
      {{2, 3, 11, 9}, {5, 3, 3, 3}, true,  2,      1},  // strided: the three ops
  };
  // clang-format on
  for (const Conv& c : fused) {
    const std::string name = "conv2d_relu_max_pool2d x " + shape_str(c.xs) + " w " +
                             shape_str(c.ws) + " stride " + std::to_string(c.stride) +
                             (c.bias ? "" : " no bias");
    std::vector<In> in{x(c.xs), x(c.ws)};
    if (c.bias) in.push_back(x({c.ws[0]}));
    t.push_back({name,
                 {"conv2d_relu_max_pool2d"},
                 in,
                 [c](const V& v) {
      return V{conv2d_relu_max_pool2d(v[0], v[1], c.bias ? v[2] : Tensor(), c.stride, c.pad)};
                 },
                 kGemm});
  }

  // ---- pooling: kernel, stride (0 = kernel), padding ----
  struct Pool {
    Shape xs;
    int64_t k, stride, pad;
  };
  // clang-format off
  const Pool pools[] = {
    // xs              k  stride  pad
      {{2, 3, 10, 10}, 2, 0,      0},
      {{2, 3, 11, 9},  3, 2,      1},
      {{1, 5, 7, 7},   3, 1,      1},
      {{2, 2, 9, 13},  2, 1,      1},
      {{3, 4, 28, 28}, 2, 2,      0},
  };
  // clang-format on
  for (const Pool& p : pools) {
    const std::string geom = shape_str(p.xs) + " k " + std::to_string(p.k) + " stride " +
                             std::to_string(p.stride) + " pad " + std::to_string(p.pad);
    // clang-format off
    //           name                            covers          inputs        f, tol
    t.push_back({"max_pool2d " + geom,           {"max_pool2d"}, {x(p.xs)},    [p](const V& v) { return V{max_pool2d(v[0], p.k, p.stride, p.pad)}; }});
    t.push_back({"max_pool2d with ties " + geom, {"max_pool2d"}, {ties(p.xs)}, [p](const V& v) { return V{max_pool2d(v[0], p.k, p.stride, p.pad)}; }});
    t.push_back({"avg_pool2d " + geom,           {"avg_pool2d"}, {x(p.xs)},    [p](const V& v) { return V{avg_pool2d(v[0], p.k, p.stride, p.pad)}; }, kSum});
    // clang-format on
  }

  // ---- batch_norm: x, weight, bias, running_mean, running_var ----
  // Outputs include the running stats after the call: training updates them in place.
  auto bn = [](bool training, bool affine) {
    return [training, affine](const V& v) {
      Tensor rm = v[3].detach().clone(), rv = add_scalar(abs(v[4]), 0.5f).detach();
      Tensor y = batch_norm(v[0], rm, rv, affine ? v[1] : Tensor(), affine ? v[2] : Tensor(),
                            training, 0.1f, 1e-5f);
      return V{y, rm, rv};
    };
  };
  for (const Shape& xs : {Shape{37, 5}, Shape{3, 4, 7, 5}}) {
    const Shape c{xs[1]};
    for (bool training : {true, false}) {
      for (bool affine : {true, false}) {
        t.push_back({"batch_norm " + shape_str(xs) + (training ? " train" : " eval") +
                         (affine ? "" : " no affine"),
                     {"batch_norm"},
                     {x(xs), x(c), x(c), cst(c), cst(c)},
                     bn(training, affine),
                     kSum});
      }
    }
  }
  t.push_back(
      {"batch_norm without running stats",
       {"batch_norm"},
       {x({4, 3, 5, 5}), x({3}), x({3})},
       [](const V& v) { return V{batch_norm(v[0], {}, {}, v[1], v[2], true, 0.1f, 1e-5f)}; },
       kSum});

  // A small CNN step through every nn op at once (formerly in tests/ops/test_nn_ops.cpp):
  // x, conv weight, conv bias, bn weight, bn bias -> the loss and the running stats.
  t.push_back({"small CNN composite",
               {"conv2d", "batch_norm", "relu", "max_pool2d", "avg_pool2d", "dropout", "narrow",
                "cross_entropy", "mse_loss", "softmax"},
               {x({2, 3, 6, 6}), x({4, 3, 3, 3}), x({4}), x({4}), x({4})},
               [](const V& v) {
    const TensorOptions on{.device = v[0].device()};
    Tensor rm = zeros({4}, on), rv = ones({4}, on);
    Tensor h = conv2d(v[0], v[1], v[2], 1, 1);  // [2, 4, 6, 6]
    h = batch_norm(h, rm, rv, v[3], v[4], true, 0.1f, 1e-5f);
    h = avg_pool2d(max_pool2d(relu(h), 2), 3, 1, 1);  // [2, 4, 3, 3]
    Generator g(5);
    h = dropout(h, 0.25f, true, &g);
    Tensor logits = narrow(reshape(h, {2, -1}), 1, 0, 5);  // [2, 5]
    Tensor target = from_vector(std::vector<int64_t>{1, 3}, {2}, on);
    Tensor loss =
        add(cross_entropy(logits, target), mse_loss(softmax(logits, 0), zeros_like(logits)));
    return V{loss, rm, rv};
               },
               kGemm});
  return t;
}

}  // namespace dplab::parity
