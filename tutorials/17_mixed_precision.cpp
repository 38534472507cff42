// Tutorial 17: mixed precision, float32 vs float16 + GradScaler vs bfloat16.
// What you will learn: what the two 16-bit formats can hold; why float16 needs loss scaling
// (a model whose gradients all round to zero, and the same model training once the loss is
// scaled); Apex O1 (autocast) on the CNN: accuracy, activation memory per step from shapes
// and measured, speed on this CPU; and the gradient bytes each rank sends under DDP for O1
// (float32 gradients) and O2 (16-bit gradients). Read 17_mixed_precision.md beside it.
// Run: 17_mixed_precision [--limit 10000] [--epochs 2] [--threads 1]
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <memory>
#include <thread>

#include "datasets/fashion_mnist.h"
#include "framework/backend/cpu/cpu_half.h"
#include "framework/ops/autocast.h"
#include "framework/amp/master_weights.h"
#include "framework/amp/precision.h"
#include "framework/data/dataloader.h"
#include "framework/dplab.h"
#include "framework/nn/layers.h"
#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/half.h"
#include "models/lenet.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/rendezvous/hash_store.h"
#include "tutorials/train_common.h"

using namespace dplab;
using amp::Precision;

namespace {

constexpr Precision kAll[] = {Precision::Fp32, Precision::Fp16, Precision::Bf16};

void show_formats() {
  fmt::print("== The formats ==\n  {:<9} {:>5} {:>12} {:>16} {:>12}\n", "dtype", "bytes", "largest",
             "smallest > 0", "ulp at 1");
  fmt::print("  {:<9} {:>5} {:>12.4g} {:>16.4g} {:>12.4g}\n", "float32", 4, 3.4028235e38, 1.4e-45, std::ldexp(1.0, -23));
  fmt::print("  {:<9} {:>5} {:>12.4g} {:>16.4g} {:>12.4g}\n", "float16", 2, half_to_float(0x7bff),
             half_to_float(0x0001), std::ldexp(1.0, -10));
  fmt::print("  {:<9} {:>5} {:>12.4g} {:>16.4g} {:>12.4g}\n", "bfloat16", 2, bfloat16_to_float(0x7f7f),
             bfloat16_to_float(0x0001), std::ldexp(1.0, -7));
  Tensor probe = from_vector(std::vector<float>{70000.0f, 1e-8f, 1.0001f, 0.1f}, {4});
  for (DType t : {DType::Float16, DType::BFloat16}) {
    auto v = probe.to(t).to(DType::Float32).to_vector<float>();
    fmt::print("  in {:<8}: 70000 -> {}, 1e-8 -> {}, 1.0001 -> {}, 0.1 -> {:.8f}\n", dtype_name(t), v[0], v[1], v[2], v[3]);
  }
}

// The underflow demo: y = x w^T, x ~ 3e-5, float16 weights (Apex O2). dL/dw ~ 1e-9 is below
// float16's smallest subnormal (6e-8): every gradient is exactly 0 unless the loss is scaled.
void underflow_demo() {
  fmt::print("\n== Why loss scaling: a regression whose float16 gradients underflow ==\n");
  Generator gen(11);
  Tensor x = mul_scalar(randn({256, 64}, {}, &gen), 3e-5f).to(DType::Float16);
  Tensor target = matmul(x.to(DType::Float32), transpose(randn({1, 64}, {}, &gen), 0, 1));
  for (bool scaled : {false, true}) {
    auto model = std::make_shared<nn::Linear>(64, 1, nn::LinearOptions{.bias = false});
    { NoGradGuard g; model->weight.zero_(); }
    amp::cast_module_(*model, DType::Float16);
    amp::MasterWeightOptimizer opt(model->parameters(), [](std::vector<Tensor> masters) {
      return std::make_unique<optim::Adam>(masters, optim::AdamOptions{.lr = 0.05, .eps = 1e-12});
    });
    amp::GradScaler scaler({.enabled = scaled});
    for (int step = 0; step < 60; ++step) {
      opt.zero_grad();
      Tensor loss = mse_loss(model->forward(x).to(DType::Float32), target);
      scaler.scale(loss).backward();
      if (step == 0) {
        int nonzero = 0;
        float largest = 0;
        for (float g : model->weight.grad().to(DType::Float32).to_vector<float>()) {
          nonzero += g != 0.0f;
          largest = std::max(largest, std::fabs(g));
        }
        fmt::print("  {:<22} step 0: loss {:.3e}, {:2d} of 64 float16 gradients non-zero (largest {:.3e})\n",
                   scaled ? "with GradScaler (2^16)" : "without scaling", loss.item(), nonzero, largest);
      }
      scaler.step(opt);
      scaler.update();
      if (step == 59) fmt::print("  {:<22} step 59: loss {:.3e}\n", "", loss.item());
    }
  }
}

// Bytes of the tensors one training step of LeNet keeps for backward, from shapes (batch B).
// e = bytes per activation element: 4 (float32) or 2 (16-bit under autocast).
int64_t lenet_activation_bytes(const models::LeNet& net, int64_t B, Precision p, bool print) {
  const int64_t e = p == Precision::Fp32 ? 4 : 2;
  struct Item { std::string what; int64_t elems, bytes_per; };
  std::vector<Item> items = {
      {"conv1 output [B,16,28,28] (ReLU's input)", B * 16 * 28 * 28, e},
      {"pool1 argmax [B,16,14,14] (int64)", B * 16 * 14 * 14, 8},
      {"pool1 output [B,16,14,14] (conv2's input)", B * 16 * 14 * 14, e},
      {"conv2 output [B,32,14,14] (ReLU's input)", B * 32 * 14 * 14, e},
      {"pool2 argmax [B,32,7,7] (int64)", B * 32 * 7 * 7, 8},
      {"pool2 output [B,1568] (fc's input)", B * 32 * 7 * 7, e},
      {"log_softmax output [B,10] (float32)", B * 10, 4},
  };
  if (p != Precision::Fp32) {
    int64_t weights = 0;
    for (const Tensor& t : net.parameters()) weights += t.numel();
    items.push_back({"input x cast to 16 bits [B,1,28,28]", B * 28 * 28, 2});
    items.push_back({"weights cast to 16 bits (autocast's copies)", weights, 2});
  }
  int64_t total = 0;
  for (const Item& it : items) {
    total += it.elems * it.bytes_per;
    if (print) fmt::print("    {:<46} {:>10} B\n", it.what, it.elems * it.bytes_per);
  }
  return total;
}

struct CnnResult {
  double accuracy = 0, ms_per_step = 0, final_scale = 1;
  int64_t skipped = 0, activations_measured = 0, activations_shapes = 0;
};

CnnResult train_cnn(Precision p, data::DataLoader& train, data::DataLoader& test, int epochs) {
  manual_seed(21);
  models::LeNet model;
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler = amp::make_scaler(p);
  CnnResult r;
  int64_t steps = 0;
  const double lrs[] = {0.05, 0.025, 0.005};
  const auto start = std::chrono::steady_clock::now();
  for (int e = 0; e < epochs; ++e) {
    opt.set_lr(lrs[std::min(e, 2)]);
    for (const auto& batch : train) {
      r.skipped += !amp::train_step(model, opt, scaler, batch.data, batch.target, p).stepped;
      ++steps;
    }
  }
  r.ms_per_step = 1000.0 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  r.final_scale = scaler.get_scale();
  // accuracy, with the forward under the same autocast as training
  model.eval();
  int64_t correct = 0, count = 0;
  for (const auto& batch : test) {
    NoGradGuard no_grad;
    amp::AutocastGuard autocast(p == Precision::Fp32 ? DType::Float16 : amp::compute_dtype(p), p != Precision::Fp32);
    auto pred = argmax(model.forward(batch.data), 1).to_vector<int64_t>();
    auto label = batch.target.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == label[i];
    count += static_cast<int64_t>(pred.size());
  }
  model.train();
  r.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  // activation memory of one step (batch 64): allocated after the forward, minus before
  const auto batch = *train.begin();
  const Device cpu("cpu");
  opt.zero_grad();
  const int64_t before = memory_stats(cpu).allocated_bytes;
  {
    Tensor loss;
    {
      amp::AutocastGuard autocast(p == Precision::Fp32 ? DType::Float16 : amp::compute_dtype(p), p != Precision::Fp32);
      loss = cross_entropy(model.forward(batch.data), batch.target);
    }
    r.activations_measured = memory_stats(cpu).allocated_bytes - before - loss.nbytes();
  }
  r.activations_shapes = lenet_activation_bytes(model, batch.data.size(0), p, false);
  return r;
}

// One DDP step of LeNet on `world` ranks (threads in this process): bytes each rank sent
// in all-reduces. O1 keeps float32 weights, so float32 gradients; O2's are 16-bit.
int64_t ddp_bytes_per_rank(int world, DType weights) {
  auto store = std::make_shared<parallel::HashStore>(parallel::Seconds(30.0));
  std::vector<int64_t> sent(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      auto pg = parallel::create_process_group(store, r, world);
      manual_seed(1);
      auto model = std::make_shared<models::LeNet>();
      if (weights != DType::Float32) amp::cast_module_(*model, weights);
      parallel::DistributedDataParallel ddp(model, {.process_group = pg});
      Generator gen(r);
      Tensor x = randn({8, 1, 28, 28}, {}, &gen).to(weights);
      pg->reset_comm_stats();
      cross_entropy(ddp.forward(x), randint(0, 10, {8}, {}, &gen)).backward();
      sent[r] = pg->comm_stats().per_collective["all_reduce"].bytes_sent;
    });
  for (auto& t : ranks) t.join();
  return sent[0];
}

// Where the CPU's time goes: one GEMM [256, 1568] @ [1568, 256] (LeNet's fc layer on a big
// batch, transposed) in each dtype, best of 5. 16-bit GEMMs convert their operands to float32
// first (backend/cpu/cpu_gemm_lowp.cpp): the same float GEMM, plus the conversions.
double gemm_ms(DType t) {
  Generator gen(5);
  Tensor a = randn({256, 1568}, {}, &gen).to(t), b = randn({1568, 256}, {}, &gen).to(t);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    Tensor c = matmul(a, b);
    best = std::min(best, 1000.0 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 17: mixed precision"};
  int epochs = 2, threads = 1;
  int64_t limit = 10000, test_limit = 0;
  double max_gap = 0.01;
  std::string csv;
  app.add_option("--epochs", epochs)->check(CLI::Range(1, 3));
  app.add_option("--limit", limit, "training images (0: all 60000)");
  app.add_option("--test-limit", test_limit, "test images (0: all 10000)");
  app.add_option("--threads", threads, "threads for the CPU kernels")->check(CLI::PositiveNumber);
  app.add_option("--max-gap", max_gap, "exit 1 if a 16-bit run's accuracy is further than this from float32's");
  app.add_option("--csv", csv, "also write the CNN and GEMM figures to this CSV file");
  CLI11_PARSE(app, argc, argv);
  try {
    set_num_threads(threads);
    // LeNet's conv -> ReLU -> pool stages run fused in float32 (ops.h: conv2d_relu_max_pool2d)
    // and as three ops in 16 bits; unfused throughout, the three precisions run the same ops.
    set_fused_conv(false);
    show_formats();
    underflow_demo();

    auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = limit});
    auto test = std::make_shared<datasets::FashionMNIST>("test", datasets::FashionMNISTOptions{.limit = test_limit});
    data::DataLoader train_loader(train, {.batch_size = 64, .shuffle = true, .seed = 3});
    data::DataLoader test_loader(test, {.batch_size = 500});
    fmt::print("\n== LeNet on Fashion-MNIST, Apex O1 (autocast), SGD momentum 0.9, {} epochs on {} images, "
               "{} thread(s) ==\n", epochs, train->size(), threads);
    fmt::print("  {:<5} {:>13} {:>12} {:>8} {:>13} {:>20} {:>20}\n", "", "test accuracy", "ms per step",
               "skipped", "final scale", "activations (shapes)", "activations (meas.)");
    std::vector<CnnResult> results;
    for (Precision p : kAll) {
      CnnResult r = train_cnn(p, train_loader, test_loader, epochs);
      results.push_back(r);
      fmt::print("  {:<5} {:>12.2f}% {:>12.1f} {:>8} {:>13g} {:>18} B {:>18} B\n", amp::precision_name(p),
                 100 * r.accuracy, r.ms_per_step, r.skipped, r.final_scale, r.activations_shapes,
                 r.activations_measured);
    }
    fmt::print("  fp16 vs fp32: {:+.2f} points, bf16 vs fp32: {:+.2f} points; step time x{:.2f} (fp16), x{:.2f} (bf16)\n",
               100 * (results[1].accuracy - results[0].accuracy), 100 * (results[2].accuracy - results[0].accuracy),
               results[1].ms_per_step / results[0].ms_per_step, results[2].ms_per_step / results[0].ms_per_step);

    fmt::print("\n== One GEMM [256, 1568] @ [1568, 256], best of 5 (conversion path: {}) ==\n",
               half_path_name(half_path()));
    std::vector<double> gemm;
    for (Precision p : kAll) {
      gemm.push_back(gemm_ms(amp::compute_dtype(p)));
      fmt::print("  {:<5} {:6.2f} ms  ({:.1f} GFLOP/s)\n", amp::precision_name(p), gemm.back(),
                 2.0 * 256 * 1568 * 256 / (gemm.back() * 1e6));
    }
    if (!csv.empty()) {
      std::FILE* f = std::fopen(csv.c_str(), "w");
      DPLAB_CHECK(f != nullptr, "--csv: cannot write {}", csv);
      fmt::print(f, "precision,test_accuracy,ms_per_step,skipped_steps,final_scale,activation_bytes_shapes,"
                    "activation_bytes_measured,gemm_ms\n");
      for (size_t i = 0; i < results.size(); ++i)
        fmt::print(f, "{},{:.4f},{:.2f},{},{:g},{},{},{:.3f}\n", amp::precision_name(kAll[i]), results[i].accuracy,
                   results[i].ms_per_step, results[i].skipped, results[i].final_scale, results[i].activations_shapes,
                   results[i].activations_measured, gemm[i]);
      std::fclose(f);
    }

    fmt::print("\n== Activation memory of one step (batch 64), from shapes ==\n");
    models::LeNet net;
    for (Precision p : {Precision::Fp32, Precision::Fp16}) {
      fmt::print("  {}:\n", p == Precision::Fp32 ? "float32" : "16-bit (fp16 and bf16 alike)");
      fmt::print("    {:<46} {:>10} B\n", "total", lenet_activation_bytes(net, 64, p, true));
    }

    int64_t params = 0;
    for (const Tensor& t : net.parameters()) params += t.numel();
    fmt::print("\n== Gradient all-reduce under DDP, per rank per step ({} parameters) ==\n", params);
    for (int world : {2, 4}) {
      const int64_t o1 = ddp_bytes_per_rank(world, DType::Float32), o2 = ddp_bytes_per_rank(world, DType::Float16),
                    o2b = ddp_bytes_per_rank(world, DType::BFloat16);
      const double ring = 2.0 * (world - 1) / world * static_cast<double>(params);
      fmt::print("  {} ranks: O1 (float32 grads) {} B [ring: 2(N-1)/N x 4 x {} = {:.0f}]; O2 float16 {} B, "
                 "bfloat16 {} B [x 2 bytes = {:.0f}]\n", world, o1, params, 4 * ring, o2, o2b, 2 * ring);
    }
    const double gap = std::max(std::fabs(results[1].accuracy - results[0].accuracy),
                                std::fabs(results[2].accuracy - results[0].accuracy));
    if (gap > max_gap) {
      fmt::print(stderr, "FAIL: a 16-bit run is {:.2f} points away from float32\n", 100 * gap);
      return 1;
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
