// Tutorial 02: train an MLP on Fashion-MNIST.
// What you will learn: the training loop (zero_grad, forward, loss, backward, step), how to
// evaluate (model.eval() + NoGradGuard), and where the memory of one training step goes:
// weights + gradients + optimizer state + activations, computed from shapes and checked
// against the allocator's measured peak. Read 02_train_mlp.md beside this file.
// Run: 02_train_mlp [--epochs 5] [--limit N] [--device cpu:1] [--threads 1]
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <memory>

#include "datasets/fashion_mnist.h"
#include "framework/dplab.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"
#include "tutorials/train_common.h"

using namespace dplab;

namespace {

int64_t bytes_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.nbytes();
  return n;
}

// The activations one training step of the MLP keeps for backward, from shapes alone.
// An output is kept when the backward of the op that reads it needs it: ReLU's backward
// needs its input (the Linear output), a Linear's backward needs its input (x, or the ReLU
// output). The logits are not kept: log_softmax's backward is written in its own output
// [B, 10], which it keeps instead; the per-example losses [B] go after the mean (its
// backward needs only their count), leaving the scalar loss we hold.
int64_t activation_bytes(const models::MLP& mlp, int64_t batch) {
  int64_t floats = 0, width = mlp.in_features;
  auto children = mlp.named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& [name, child] = children[i];
    if (auto lin = std::dynamic_pointer_cast<nn::Linear>(child)) width = lin->out_features;
    const bool kept = i + 1 < children.size();  // read by a ReLU or Linear: kept
    if (kept) floats += batch * width;
    const std::string what = fmt::format("  ({}) {} output [{}, {}]", name,
                                         child->name().substr(0, child->name().find('(')), batch, width);
    fmt::print("    {:<44} {:>9} B  {}\n", what, batch * width * 4,
               kept ? "kept" : "freed (log_softmax keeps its output)");
  }
  const int64_t loss_floats = batch * mlp.num_classes + 1;
  floats += loss_floats;
  fmt::print("    {:<44} {:>9} B  kept\n",
             fmt::format("  log_softmax [{}, {}] + scalar loss", batch, mlp.num_classes), loss_floats * 4);
  return floats * 4;
}

// One training step on a fresh batch, measured phase by phase with memory_stats(device).
void explain_step_memory(models::MLP& model, optim::SGD& opt, data::DataLoader& loader,
                         Device dev) {
  auto it = loader.begin();
  Tensor x = it->data.to(dev), y = it->target.to(dev);
  const int64_t batch = x.size(0);
  opt.zero_grad();  // last step's gradients go now, before the measurement starts

  const int64_t weights = bytes_of(model.parameters());
  const int64_t grads = weights;    // one .grad per parameter, same shape
  const int64_t momentum = weights;  // SGD(momentum=0.9): one buffer per parameter
  const int64_t input = x.nbytes() + y.nbytes();
  fmt::print("\n== Memory of one training step on {} (batch {}) ==\n", dev, batch);
  auto line = [](const std::string& what, int64_t bytes, const std::string& note) {
    fmt::print("    {:<44} {:>9} B  {}\n", what, bytes, note);
  };
  fmt::print("  from shapes:\n");
  line(fmt::format("weights: {} parameters x 4 bytes", weights / 4), weights, "");
  line("gradients: one per weight, same shapes", grads, "");
  line("momentum: SGD's buffer, one per weight", momentum, "");
  line(fmt::format("input: x [{}, 1, 28, 28] + labels [{}]", batch, batch), input, "");
  fmt::print("    activations kept for backward:\n");
  const int64_t acts = activation_bytes(model, batch);
  line("activations total", acts, "");

  const int64_t base = memory_stats(dev).allocated_bytes;  // weights + momentum + batch
  reset_peak_memory_stats(dev);
  Tensor loss = cross_entropy(model.forward(x), y);
  const int64_t after_forward = memory_stats(dev).allocated_bytes;
  loss.backward();
  const int64_t after_backward = memory_stats(dev).allocated_bytes;
  opt.step();  // in place: allocates nothing
  const MemoryStats s = memory_stats(dev);

  const int64_t upper = weights + grads + momentum + input + acts;
  fmt::print("  measured by memory_stats({}):\n", dev);
  line("before: weights + momentum + input", base, fmt::format("shapes: {} B", weights + momentum + input));
  line("after forward: + activations", after_forward - base, fmt::format("shapes: {} B", acts));
  line("after backward: + gradients", after_backward - base,
       fmt::format("shapes: {} B + the 4-byte loss", grads));
  line("peak of the step", s.peak_bytes, fmt::format("= before + {} B", s.peak_bytes - base));
  line("if everything were alive at once", upper, "");
  fmt::print("  Backward frees each node's saved activations right after the node ran, so the peak\n"
             "  is not the sum: it comes when the largest gradient (the first layer's weight) is\n"
             "  allocated, {} B above the gradients, i.e. after most activations are gone.\n",
             s.peak_bytes - base - grads);
  DPLAB_CHECK(s.peak_bytes <= upper + 64 * 1024,
              "memory: measured peak {} exceeds the shape-based total {} by more than 64 KB", s.peak_bytes, upper);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 02: train an MLP on Fashion-MNIST"};
  int epochs = 5, threads = 1;
  int64_t limit = 0, test_limit = 0, batch_size = 64;
  double lr = 0.1, momentum = 0.9, min_accuracy = 0.0;
  uint64_t seed = 0;
  std::string device = "cpu:1", schedule = "cosine";
  app.add_option("--epochs", epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--limit", limit, "use only the first N training images (0: all 60000)");
  app.add_option("--test-limit", test_limit, "use only the first N test images (0: all 10000)");
  app.add_option("--batch-size", batch_size)->check(CLI::PositiveNumber);
  app.add_option("--lr", lr);
  app.add_option("--momentum", momentum);
  app.add_option("--schedule", schedule, "lr per epoch: cosine (from --lr down towards 0) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--seed", seed, "initial weights and shuffling");
  app.add_option("--device", device, "where the model trains; the dataset stays on cpu:0");
  app.add_option("--threads", threads, "threads for the CPU kernels")->check(CLI::PositiveNumber);
  app.add_option("--min-accuracy", min_accuracy, "exit 1 if the final test accuracy is below this");
  CLI11_PARSE(app, argc, argv);

  try {
    set_num_threads(threads);
    manual_seed(seed);
    const Device dev(device);
    auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = limit});
    auto test = std::make_shared<datasets::FashionMNIST>("test", datasets::FashionMNISTOptions{.limit = test_limit});
    data::DataLoader train_loader(train, {.batch_size = batch_size, .shuffle = true, .seed = seed});
    data::DataLoader test_loader(test, {.batch_size = 1000});
    fmt::print("Fashion-MNIST: {} training images, {} test images (from {})\n", train->size(),
               test->size(), train->images_path());

    auto model = std::make_shared<models::MLP>();
    model->to(dev);  // then hand the (rebound) parameters to the optimizer
    optim::SGD opt(model->parameters(), {.lr = lr, .momentum = momentum});
    fmt::print("{}\n{} parameters on {}; SGD lr {} momentum {}, batch {}, {} thread(s)\n",
               nn::describe(*model), bytes_of(model->parameters()) / 4, dev, lr, momentum,
               batch_size, threads);
    fmt::print("kernels: {}\n\n", kernels_summary());

    // Cosine annealing: lr = base * (1 + cos(pi * epoch / epochs)) / 2, set once per epoch.
    // The large early steps make fast progress; the small late ones settle into a minimum
    // instead of bouncing around it (--schedule constant, 0.1 throughout, ends a few points lower).
    std::unique_ptr<optim::LRScheduler> scheduler;
    if (schedule == "cosine")
      scheduler = std::make_unique<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingLROptions{.t_max = epochs});
    tutorials::EvalResult last;
    for (int e = 1; e <= epochs; ++e) {
      const double epoch_lr = opt.lr();
      auto r = tutorials::train_one_epoch(*model, opt, train_loader, dev, fmt::format("epoch {}/{}", e, epochs));
      last = tutorials::evaluate(*model, test_loader, dev);
      if (scheduler) scheduler->step();
      fmt::print("epoch {} (lr {:.4f}): train loss {:.4f} acc {:.2f}% ({:.1f} s, {:.0f} samples/s) | test loss {:.4f} acc {:.2f}%\n",
                 e, epoch_lr, r.loss, 100 * r.accuracy, r.seconds, static_cast<double>(r.count) / r.seconds,
                 last.loss, 100 * last.accuracy);
    }

    explain_step_memory(*model, opt, train_loader, dev);

    fmt::print("\nfinal test accuracy: {:.2f}%\n", 100 * last.accuracy);
    if (last.accuracy < min_accuracy) {
      fmt::print(stderr, "FAIL: test accuracy {:.2f}% is below --min-accuracy {:.2f}%\n",
                 100 * last.accuracy, 100 * min_accuracy);
      return 1;
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
