// 15_horovod_style.cpp: Horovod's API over dplab, and fp16 gradient compression.
// What you will learn:
//   - the Horovod recipe: hvd::init(); broadcast_parameters(model, 0); wrap the optimizer in
//     hvd::DistributedOptimizer; the training loop is the single-process one, unchanged,
//   - DistributedOptimizer averages each gradient with an async all-reduce the moment
//     backward finishes it, and step() waits: DDP's overlap, done from the optimizer side,
//   - Compression::fp16 sends gradients as float16: exactly half the bytes, and the model
//     trained on Fashion-MNIST ends at the same accuracy (within a fraction of a point).
// Run: ./15_horovod_style [--ranks 2] [--train 6000] [--epochs 2]. Read the .md beside it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "datasets/fashion_mnist.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/mlp.h"
#include "parallel/horovod/horovod.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace par = dplab::parallel;
namespace hvd = dplab::parallel::hvd;

int g_ranks = 2, g_epochs = 2;
int64_t g_train = 6000;
constexpr int64_t kBatch = 32;  // per rank

struct Result {
  double accuracy = 0;
  double kb_sent_per_step = 0;
  int64_t allreduces_per_step = 0;
};

Result train(par::Compression compression, const datasets::FashionMNIST& train_set,
             const datasets::FashionMNIST& test_set) {
  manual_seed(static_cast<uint64_t>(hvd::rank()));  // ranks start different on purpose...
  auto model = std::make_shared<models::MLP>(784, std::vector<int64_t>{128}, 10);
  hvd::broadcast_parameters(*model, /*root_rank=*/0);  // ...and this makes them rank 0's
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.02, .momentum = 0.9});
  hvd::DistributedOptimizer opt(sgd, model->named_parameters(), compression);

  auto& pg = par::default_process_group();
  pg.reset_comm_stats();
  // Each step takes kBatch rows per rank from one global batch of kBatch * size rows.
  const int64_t global = kBatch * hvd::size(), steps = train_set.size() / global;
  for (int e = 0; e < g_epochs; ++e) {
    for (int64_t s = 0; s < steps; ++s) {
      int64_t start = s * global + hvd::rank() * kBatch;
      Tensor x = train_set.data().narrow(start, kBatch), y = train_set.targets().narrow(start, kBatch);
      opt.zero_grad();
      cross_entropy(model->forward(x), y).backward();
      opt.step();
    }
  }
  auto st = pg.comm_stats().per_collective["all_reduce"];
  Result r;
  r.kb_sent_per_step = static_cast<double>(st.bytes_sent) / (steps * g_epochs) / 1024.0;
  r.allreduces_per_step = st.calls / (steps * g_epochs);
  NoGradGuard no_grad;  // every rank evaluates the whole test set (the models are identical)
  Tensor pred = argmax(model->forward(test_set.data()), 1);
  r.accuracy = 100.0 * sum(eq(pred.to(DType::Float32), test_set.targets().to(DType::Float32))).item() /
               static_cast<double>(test_set.size());
  return r;
}

void worker(int) {
  hvd::init({.timeout = par::Seconds(60.0)});
  datasets::FashionMNIST train_set("train", {.limit = g_train}), test_set("test", {.limit = 2000});
  Result plain = train(par::Compression::none, train_set, test_set);
  Result half = train(par::Compression::fp16, train_set, test_set);
  if (hvd::rank() == 0) {
    std::printf("hvd: rank %d of %d (local rank %d); MLP 784-128-10, %lld training images, %d epochs\n",
                hvd::rank(), hvd::size(), hvd::local_rank(), static_cast<long long>(g_train), g_epochs);
    std::printf("%-18s %16s %16s %14s\n", "compression", "all-reduces/step", "KB sent/step", "test accuracy");
    std::printf("%-18s %16lld %16.1f %13.2f%%\n", "none (float32)", static_cast<long long>(plain.allreduces_per_step),
                plain.kb_sent_per_step, plain.accuracy);
    std::printf("%-18s %16lld %16.1f %13.2f%%\n", "fp16", static_cast<long long>(half.allreduces_per_step),
                half.kb_sent_per_step, half.accuracy);
    std::printf("traffic ratio fp16 / float32 = %.3f, accuracy difference = %.2f points\n",
                half.kb_sent_per_step / plain.kb_sent_per_step, half.accuracy - plain.accuracy);
  }
  DPLAB_CHECK(half.kb_sent_per_step * 2 == plain.kb_sent_per_step, "fp16 should send exactly half the bytes");
  DPLAB_CHECK(std::abs(half.accuracy - plain.accuracy) < 1.0, "fp16 accuracy {:.2f}% vs {:.2f}%: more than "
              "a point apart", half.accuracy, plain.accuracy);
  DPLAB_CHECK(plain.accuracy > 70.0, "training did not learn: {:.2f}%", plain.accuracy);
  hvd::shutdown();
}

int main(int argc, char** argv) {
  if (auto exit = tutorials::parse_int_options(argc, argv, "Tutorial 15: the Horovod-style API",
                                                {{"--ranks", &g_ranks, "ranks to spawn", 1, 64},
                                                 {"--train", &g_train, "training images", 1},
                                                 {"--epochs", &g_epochs, "passes over them", 1}}))
    return *exit;
  return tutorials::run_spawned("15_horovod_style", g_ranks, worker);
}
