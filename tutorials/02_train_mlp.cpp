// Tutorial 02: train an MLP on Fashion-MNIST.
// What you will learn: the training loop (zero_grad, forward, loss, backward, step), how to
// evaluate (model.eval() + NoGradGuard), and where the memory of one training step goes:
// weights + gradients + optimizer state + activations, computed from shapes and checked
// against the allocator's measured peak. Read 02_train_mlp.md beside this file.
// Run: 02_train_mlp [--epochs 5] [--limit N] [--device cpu:1] [--threads 1]
#include <fmt/core.h>

#include <memory>

#include "datasets/fashion_mnist.h"
#include "framework/dplab.h"
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
  tutorials::TrainArgs a{.epochs = 5, .lr = 0.1};
  if (auto exit = tutorials::parse_train_args(argc, argv, "Tutorial 02: train an MLP on Fashion-MNIST", a)) return *exit;
  try {
    set_num_threads(a.threads);
    manual_seed(a.seed);
    const Device dev(a.device);
    auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = a.limit});
    auto test = std::make_shared<datasets::FashionMNIST>("test", datasets::FashionMNISTOptions{.limit = a.test_limit});
    data::DataLoader train_loader(train, {.batch_size = a.batch_size, .shuffle = true, .seed = a.seed});
    data::DataLoader test_loader(test, {.batch_size = 1000});
    fmt::print("Fashion-MNIST: {} training images, {} test images (from {})\n", train->size(),
               test->size(), train->images_path());

    auto model = std::make_shared<models::MLP>();
    model->to(dev);  // then hand the (rebound) parameters to the optimizer
    optim::SGD opt(model->parameters(), {.lr = a.lr, .momentum = a.momentum});
    fmt::print("{}\n{} parameters on {}; SGD lr {} momentum {}, batch {}, {} thread(s)\n",
               nn::describe(*model), bytes_of(model->parameters()) / 4, dev, a.lr, a.momentum,
               a.batch_size, a.threads);
    fmt::print("kernels: {}\n\n", kernels_summary());

    // the epochs, with the learning rate annealed along a cosine (--schedule constant keeps it)
    const tutorials::EvalResult last = tutorials::train_epochs(*model, opt, train_loader, test_loader, dev, a);

    explain_step_memory(*model, opt, train_loader, dev);

    return tutorials::final_accuracy_status(last, a.min_accuracy);
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
