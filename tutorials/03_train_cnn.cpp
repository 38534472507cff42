// Tutorial 03: train a LeNet-style CNN on Fashion-MNIST.
// What you will learn: how convolution and pooling change shapes along a network
// ([N,1,28,28] -> [N,16,14,14] -> [N,32,7,7] -> [N,10]), why a CNN has 8x fewer parameters
// than the MLP of tutorial 02 yet does 12x more arithmetic per image, and that it is more
// accurate. The loop is tutorial 02's (train_common.h). Read 03_train_cnn.md beside this.
// Run: 03_train_cnn [--epochs 3] [--limit N] [--device cpu:1] [--threads 1]
#include <fmt/core.h>

#include <memory>

#include "datasets/fashion_mnist.h"
#include "framework/dplab.h"
#include "framework/optim/sgd.h"
#include "models/lenet.h"
#include "tutorials/train_common.h"

using namespace dplab;

namespace {

int64_t count_params(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

// Multiply-adds per image of a layer: conv = out elements x (C_in * k * k); linear = in * out.
int64_t conv_macs(const nn::Conv2d& c, const Tensor& out) {
  return out.numel() / out.size(0) * c.in_channels * c.kernel_size * c.kernel_size;
}

// Runs LeNet's forward step by step on one batch, module by module, and prints each stage's
// output shape, parameters and multiply-adds per image; then LeNet::forward itself, whose
// stages run each conv, ReLU and pool as one op, and whether it gave the same floats.
void show_shapes(models::LeNet& net, const Tensor& x) {
  NoGradGuard no_grad;
  auto row = [](const std::string& what, const Tensor& t, int64_t params, int64_t macs) {
    fmt::print("  {:<34} -> {:<16} {:>8} params {:>12} MACs/image\n", what, shape_str(t.shape()),
               params, macs);
  };
  fmt::print("== Shapes along the network (batch of {}) ==\n", x.size(0));
  row("input", x, 0, 0);
  Tensor h = net.conv1->forward(x);
  const int64_t m1 = conv_macs(*net.conv1, h);
  row("conv1 5x5, 1->16, pad 2", h, count_params(*net.conv1), m1);
  h = net.relu->forward(h);
  row("relu", h, 0, 0);
  h = net.pool->forward(h);
  row("maxpool 2x2, stride 2", h, 0, 0);
  h = net.conv2->forward(h);
  const int64_t m2 = conv_macs(*net.conv2, h);
  row("conv2 5x5, 16->32, pad 2", h, count_params(*net.conv2), m2);
  h = net.pool->forward(net.relu->forward(h));
  row("relu + maxpool 2x2", h, 0, 0);
  h = net.flatten->forward(h);
  row("flatten", h, 0, 0);
  h = net.fc->forward(h);
  const int64_t m3 = net.fc->in_features * net.fc->out_features;
  row("fc 1568->10", h, count_params(*net.fc), m3);
  const bool same = net.forward(x).to_vector<float>() == h.to_vector<float>();
  fmt::print("  LeNet::forward (conv + ReLU + pool fused{}): {}\n",
             fused_conv() ? "" : ", switched off by DPLAB_FUSE=0",
             same ? "the same floats as the steps above" : "DIFFERENT from the steps above");
  const int64_t mlp_macs = 784 * 256 + 256 * 128 + 128 * 10;
  fmt::print("  total: {} parameters, {:.2f} M multiply-adds per image forward\n",
             count_params(net), static_cast<double>(m1 + m2 + m3) / 1e6);
  fmt::print("  (the MLP of tutorial 02: 235146 parameters, {:.2f} M multiply-adds: the CNN has\n"
             "   {:.1f}x fewer weights but reuses each one at every position, {:.1f}x more work)\n\n",
             static_cast<double>(mlp_macs) / 1e6, 235146.0 / static_cast<double>(count_params(net)),
             static_cast<double>(m1 + m2 + m3) / static_cast<double>(mlp_macs));
}

}  // namespace

int main(int argc, char** argv) {
  // lr 0.05, not tutorial 02's 0.1: with momentum 0.9 the CNN's effective step at 0.1 is too
  // large (3 epochs reach 87.9% at 0.1, 90.2% at 0.05; see the .md).
  tutorials::TrainArgs a{.epochs = 3, .lr = 0.05};
  if (auto exit = tutorials::parse_train_args(argc, argv, "Tutorial 03: train a LeNet-style CNN on Fashion-MNIST", a)) return *exit;
  try {
    set_num_threads(a.threads);
    manual_seed(a.seed);
    const Device dev(a.device);
    auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = a.limit});
    auto test = std::make_shared<datasets::FashionMNIST>("test", datasets::FashionMNISTOptions{.limit = a.test_limit});
    data::DataLoader train_loader(train, {.batch_size = a.batch_size, .shuffle = true, .seed = a.seed});
    data::DataLoader test_loader(test, {.batch_size = 500});
    fmt::print("Fashion-MNIST: {} training images, {} test images\n\n", train->size(), test->size());

    auto model = std::make_shared<models::LeNet>();
    model->to(dev);
    show_shapes(*model, test->get_batch({0, 1, 2, 3, 4, 5, 6, 7}).data.to(dev));
    optim::SGD opt(model->parameters(), {.lr = a.lr, .momentum = a.momentum});
    fmt::print("SGD lr {} momentum {}, batch {}, {} epoch(s) on {}, {} thread(s)\n", a.lr, a.momentum,
               a.batch_size, a.epochs, dev, a.threads);
    fmt::print("kernels: {}\n", kernels_summary());

    // the epochs, with the learning rate annealed along a cosine (--schedule constant keeps it)
    const tutorials::EvalResult last = tutorials::train_epochs(*model, opt, train_loader, test_loader, dev, a);
    return tutorials::final_accuracy_status(last, a.min_accuracy);
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
