// Mixed-precision training end to end.
//  1. Underflow: a regression whose float16 gradients are all exactly zero (they are ~1e-9,
//     below float16's smallest subnormal 6e-8): without loss scaling the model does not
//     move; with GradScaler the same model trains. (Apex O2: float16 weights, float32 masters.)
//  2. fp16 + GradScaler and bf16 (Apex O1: autocast, float32 weights) train the MLP and the
//     CNN on Fashion-MNIST to within 1 point of float32's test accuracy, same recipe: 3 epochs
//     of 5,000 training images (with 10,000 every difference was under 0.2 points too, in
//     twice the time), tested on all 10,000 test images.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "datasets/fashion_mnist.h"
#include "framework/amp/grad_scaler.h"
#include "framework/amp/master_weights.h"
#include "framework/amp/precision.h"
#include "framework/data/dataloader.h"
#include "framework/dplab.h"
#include "framework/nn/layers.h"
#include "framework/ops/autocast.h"
#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "models/lenet.h"
#include "models/mlp.h"

using namespace dplab;

namespace {

// y = x w^T with x ~ 3e-5 N(0, 1): the loss is ~1e-7 and dL/dw ~ 1e-9.
struct TinyRegression {
  Tensor x, target;
  TinyRegression() {
    Generator gen(11);
    x = mul_scalar(randn({256, 64}, {}, &gen), 3e-5f).to(DType::Float16);
    Tensor w_true = randn({1, 64}, {}, &gen);
    target = matmul(x.to(DType::Float32), transpose(w_true, 0, 1));  // [256, 1] float32
  }
};

struct RegressionRun {
  float first_loss = 0, last_loss = 0;
  int64_t nonzero_grads_first_step = 0;
};

RegressionRun train_regression(bool use_scaler) {
  TinyRegression data;
  auto model = std::make_shared<nn::Linear>(64, 1, nn::LinearOptions{.bias = false});
  {
    NoGradGuard g;
    model->weight.zero_();
  }
  amp::cast_module_(*model, DType::Float16);  // O2: the weights are float16
  amp::MasterWeightOptimizer opt(model->parameters(), [](std::vector<Tensor> masters) {
    // Adam moves by ~lr whatever the gradient's size; eps must sit below these ~1e-9
    // gradients (the default 1e-8 would swamp them)
    return std::make_unique<optim::Adam>(masters, optim::AdamOptions{.lr = 0.05, .eps = 1e-12});
  });
  amp::GradScaler scaler({.enabled = use_scaler});
  RegressionRun run;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor y = model->forward(data.x);                          // float16 [256, 1]
    Tensor loss = mse_loss(y.to(DType::Float32), data.target);  // float32
    scaler.scale(loss).backward();
    if (step == 0) {
      for (uint16_t bits : model->weight.grad().to_vector<uint16_t>())
        run.nonzero_grads_first_step += (bits & 0x7fff) != 0;
    }
    scaler.step(opt);
    scaler.update();
    if (step == 0) run.first_loss = loss.item();
    run.last_loss = loss.item();
  }
  return run;
}

struct Data {
  std::shared_ptr<datasets::FashionMNIST> train, test;
};
Data& fashion() {
  static Data d{std::make_shared<datasets::FashionMNIST>(
                    "train", datasets::FashionMNISTOptions{.limit = 5000}),
                std::make_shared<datasets::FashionMNIST>("test")};
  return d;
}

double accuracy(nn::Module& model, amp::Precision p) {
  model.eval();
  NoGradGuard no_grad;
  data::DataLoader loader(fashion().test, {.batch_size = 500});
  int64_t correct = 0, count = 0;
  for (const auto& batch : loader) {
    Tensor logits;
    {
      amp::AutocastGuard autocast(
          amp::compute_dtype(p) == DType::Float32 ? DType::Float16 : amp::compute_dtype(p),
          p != amp::Precision::Fp32);
      logits = model.forward(batch.data);
    }
    const std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>();
    const std::vector<int64_t> label = batch.target.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == label[i];
    count += static_cast<int64_t>(pred.size());
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(count);
}

// The same recipe for every precision: seed, init, batches, SGD with momentum.
double train_and_test(const std::string& which, amp::Precision p, int epochs, double lr) {
  manual_seed(21);
  std::shared_ptr<nn::Module> model;
  if (which == "mlp") model = std::make_shared<models::MLP>();
  else model = std::make_shared<models::LeNet>();
  optim::SGD opt(model->parameters(), {.lr = lr, .momentum = 0.9});
  amp::GradScaler scaler = amp::make_scaler(p);
  data::DataLoader loader(fashion().train, {.batch_size = 64, .shuffle = true, .seed = 3});
  int64_t skipped = 0;
  const double lrs[] = {lr, lr / 2, lr / 10};  // a step decay: every run settles near a minimum
  for (int e = 0; e < epochs; ++e) {
    opt.set_lr(lrs[std::min(e, 2)]);
    for (const auto& batch : loader)
      skipped += !amp::train_step(*model, opt, scaler, batch.data, batch.target, p).stepped;
  }
  const double acc = accuracy(*model, p);
  MESSAGE(which << " " << std::string(amp::precision_name(p)) << ": test accuracy " << acc
                << ", skipped steps " << skipped << ", final scale " << scaler.get_scale());
  return acc;
}

}  // namespace

TEST_CASE("float16 gradients underflow to zero without loss scaling; GradScaler trains the model") {
  const RegressionRun plain = train_regression(false);
  CHECK(plain.nonzero_grads_first_step == 0);  // every float16 gradient is exactly 0
  CHECK(plain.last_loss == plain.first_loss);  // so nothing moved
  const RegressionRun scaled = train_regression(true);
  CHECK(scaled.nonzero_grads_first_step == 64);  // x 65536: all 64 gradients representable
  CHECK(scaled.first_loss == plain.first_loss);
  CHECK(scaled.last_loss < 0.05f * scaled.first_loss);  // and it learns
  MESSAGE("regression loss: without scaling " << plain.first_loss << " -> " << plain.last_loss
                                              << "; with GradScaler " << scaled.first_loss << " -> "
                                              << scaled.last_loss);
}

TEST_CASE("MLP on Fashion-MNIST: fp16 + GradScaler and bf16 within 1 point of float32") {
  const double fp32 = train_and_test("mlp", amp::Precision::Fp32, 3, 0.05);
  CHECK(fp32 > 0.75);
  CHECK(std::fabs(train_and_test("mlp", amp::Precision::Fp16, 3, 0.05) - fp32) <= 0.01);
  CHECK(std::fabs(train_and_test("mlp", amp::Precision::Bf16, 3, 0.05) - fp32) <= 0.01);
}

TEST_CASE("CNN on Fashion-MNIST: fp16 + GradScaler and bf16 within 1 point of float32") {
  const double fp32 = train_and_test("cnn", amp::Precision::Fp32, 3, 0.05);
  CHECK(fp32 > 0.75);
  CHECK(std::fabs(train_and_test("cnn", amp::Precision::Fp16, 3, 0.05) - fp32) <= 0.01);
  CHECK(std::fabs(train_and_test("cnn", amp::Precision::Bf16, 3, 0.05) - fp32) <= 0.01);
}
