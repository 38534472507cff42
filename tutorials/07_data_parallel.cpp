// Tutorial 07: DataParallel, the parameter server in one process.
// What you will learn: how torch.nn.DataParallel splits a batch (Tensor.chunk's rule), runs
// one replica per device in threads and gathers the outputs on the master; and what that
// costs: the master holds the most memory and moves (N-1)x the weight traffic.
// Part 1 is the example every PyTorch user has run; part 2 trains the MLP and prints the
// per-device imbalance table. Read 07_data_parallel.md beside it.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "datasets/fashion_mnist.h"
#include "datasets/synthetic.h"
#include "framework/autograd/grad_mode.h"
#include "framework/data/dataloader.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/mlp.h"
#include "parallel/dp/data_parallel.h"

using namespace dplab;
using parallel::DataParallel;

// The seed's Model: one Linear layer that says what it sees, from inside each replica.
struct Model : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  int64_t in, out;
  Model(int64_t input_size, int64_t output_size) : in(input_size), out(output_size) {
    fc = register_module("fc", std::make_shared<nn::Linear>(input_size, output_size));
  }
  Tensor forward(const Tensor& input) override {
    Tensor output = fc->forward(input);
    fmt::print("\tIn Model: input size {} output size {}\n", shape_str(input.shape()), shape_str(output.shape()));
    return output;
  }
  std::shared_ptr<nn::Module> make_empty_copy() const override { return std::make_shared<Model>(in, out); }
};

std::vector<Device> logical_cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device(DeviceKind::CPU, i));
  return d;
}

void seed_example(int devices) {
  fmt::print("\n== Part 1: the seed example on {} devices ==\n", devices);
  data::DataLoader loader(std::make_shared<datasets::RandomDataset>(5, 100), {.batch_size = 30, .shuffle = true});
  auto model = std::make_shared<DataParallel>(std::make_shared<Model>(5, 2), logical_cpus(devices));
  for (auto& batch : loader) {
    Tensor output = model->forward(batch.data);
    fmt::print("Outside: input size {} output_size {}\n", shape_str(batch.data.shape()), shape_str(output.shape()));
  }
}

float test_accuracy(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, total = 0;
  for (auto& b : loader) {
    correct += static_cast<int64_t>(sum(eq(argmax(model.forward(b.data), 1).to(DType::Float32),
                                           b.target.to(DType::Float32))).item());
    total += b.target.numel();
  }
  model.train();
  return 100.0f * static_cast<float>(correct) / static_cast<float>(total);
}

int run(int devices, int64_t limit, int epochs) {
  manual_seed(0);
  seed_example(2);
  seed_example(8);

  fmt::print("\n== Part 2: the MLP on Fashion-MNIST over {} logical devices ==\n", devices);
  auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = limit});
  auto test = std::make_shared<datasets::FashionMNIST>("test", datasets::FashionMNISTOptions{.limit = 2000});
  data::DataLoader train_loader(train, {.batch_size = 256, .shuffle = true, .seed = 1});
  data::DataLoader test_loader(test, {.batch_size = 500});

  auto mlp = std::make_shared<models::MLP>();
  auto dp = std::make_shared<DataParallel>(mlp, logical_cpus(devices));
  optim::SGD opt(dp->parameters(), {.lr = 0.1, .momentum = 0.9});
  dp->reset_stats();
  for (int e = 0; e < epochs; ++e) {
    float last = 0;
    for (auto& b : train_loader) {
      opt.zero_grad();
      Tensor loss = cross_entropy(dp->forward(b.data), b.target);
      loss.backward();
      opt.step();
      last = loss.item();
    }
    fmt::print("epoch {}: last loss {:.3f}, test accuracy {:.1f}%\n", e + 1, last, test_accuracy(*dp, test_loader));
  }
  fmt::print("\nPer-device load (peak memory includes the batch, replicas, gradients; the master also "
             "holds the optimizer state and the gathered outputs):\n{}", dp->report());
  auto loads = dp->load();
  fmt::print("master moved {:.1f}x the bytes of cpu:1\n",
             static_cast<double>(loads[0].bytes_in + loads[0].bytes_out) /
                 static_cast<double>(std::max<int64_t>(1, loads[1 % loads.size()].bytes_in + loads[1 % loads.size()].bytes_out)));
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 07: DataParallel"};
  int devices = 4;
  int64_t limit = 12000;
  int epochs = 1;
  app.add_option("--devices", devices, "logical devices for the training part")->check(CLI::Range(1, 64));
  app.add_option("--limit", limit, "training images to use (0: all 60000)")
      ->check(CLI::Range(int64_t{0}, int64_t{60000}));
  app.add_option("--epochs", epochs, "training epochs")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(devices, limit, epochs);
  } catch (const std::exception& e) {  // a missing dataset, a bad file: say it, exit 1
    fmt::print(stderr, "07_data_parallel: error: {}\n", e.what());
    return 1;
  }
}
