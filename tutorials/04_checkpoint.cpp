// Tutorial 04: save a training checkpoint, resume from it, and get bit-for-bit the run that
// was never interrupted.
// What you will learn: what a checkpoint must hold (weights, optimizer state, epoch), how
// load_checkpoint places tensors with map_location ("cpu:1"), why resuming equals not
// stopping (same seed, deterministic loader order per epoch), what the safetensors file
// looks like inside, and what a damaged file gives. Read 04_checkpoint.md beside this.
// Run: 04_checkpoint [--limit 10000] [--out checkpoints]   (writes checkpoints/mlp_checkpoint.safetensors)
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>

#include "datasets/fashion_mnist.h"
#include "framework/dplab.h"
#include "framework/io/checkpoint.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace fs = std::filesystem;

namespace {

constexpr double kLr = 0.1, kMomentum = 0.9;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DPLAB_CHECK(in.good(), "cannot open {}", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The first bytes of a safetensors file: an 8-byte little-endian header length, then JSON.
void show_layout(const std::string& path) {
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  std::string header = bytes.substr(8, n);
  fmt::print("  {} bytes: 8 (header length = {}) + {} (JSON header) + {} (raw float32 data)\n",
             bytes.size(), n, n, bytes.size() - 8 - n);
  const size_t shown = 420;
  fmt::print("  header: {}{}\n", header.substr(0, shown), header.size() > shown ? " ..." : "");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 04: checkpoint, resume, and compare with an uninterrupted run"};
  int64_t limit = 10000, batch_size = 64;
  uint64_t seed = 0;
  std::string out_dir = "checkpoints";
  double tolerance = 1e-6;
  app.add_option("--limit", limit, "training images per epoch (0: all 60000)");
  app.add_option("--batch-size", batch_size)->check(CLI::PositiveNumber);
  app.add_option("--seed", seed);
  app.add_option("--out", out_dir, "the directory the checkpoint is written to (created if missing)");
  app.add_option("--tolerance", tolerance, "exit 1 if resumed and uninterrupted runs differ by more");
  CLI11_PARSE(app, argc, argv);

  try {
    set_num_threads(1);  // one thread: the same sums in the same order, run after run
    fs::create_directories(out_dir);
    const std::string out = (fs::absolute(out_dir) / "mlp_checkpoint.safetensors").lexically_normal().string();
    fmt::print("the checkpoint goes to {}\n", out);
    auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = limit});
    const data::DataLoaderOptions lopts{.batch_size = batch_size, .shuffle = true, .seed = seed};
    const Device cpu0("cpu:0"), cpu1("cpu:1");

    fmt::print("== 1. The reference: 2 epochs without stopping (on {}) ==\n", cpu0);
    manual_seed(seed);
    auto ref = std::make_shared<models::MLP>();
    optim::SGD ref_opt(ref->parameters(), {.lr = kLr, .momentum = kMomentum});
    data::DataLoader ref_loader(train, lopts);
    for (int e = 1; e <= 2; ++e) {
      auto r = tutorials::train_one_epoch(*ref, ref_opt, ref_loader, cpu0, fmt::format("reference epoch {}/2", e));
      fmt::print("reference epoch {}: train loss {:.4f}\n", e, r.loss);
    }

    fmt::print("\n== 2. Train 1 epoch, save model + optimizer + epoch ==\n");
    {
      manual_seed(seed);  // the same initial weights as the reference
      auto model = std::make_shared<models::MLP>();
      optim::SGD opt(model->parameters(), {.lr = kLr, .momentum = kMomentum});
      data::DataLoader loader(train, lopts);
      auto r = tutorials::train_one_epoch(*model, opt, loader, cpu0, "epoch 1/2");
      fmt::print("epoch 1: train loss {:.4f}\n", r.loss);
      save_checkpoint(out, *model, &opt, {{"epoch", "1"}, {"seed", std::to_string(seed)}});
      fmt::print("saved {} (written to a temporary, fsync'ed, renamed)\n", out);
      show_layout(out);
    }  // model, optimizer and loader are gone: all that survives is the file

    fmt::print("\n== 3. A fresh model and optimizer on {}, loaded with map_location {} ==\n", cpu1, cpu1);
    manual_seed(seed + 1);  // different initial weights, to see the load overwrite them
    auto model = std::make_shared<models::MLP>();
    model->to(cpu1);
    optim::SGD opt(model->parameters(), {.lr = 0.5});  // wrong on purpose: the file restores it
    fmt::print("before loading: max |fresh - reference| = {:.4f}, lr {}\n",
               tutorials::max_abs_param_diff(*model, *ref), opt.lr());
    const int64_t before = memory_stats(cpu1).allocated_bytes;
    reset_peak_memory_stats(cpu1);
    Metadata meta = load_checkpoint(out, *model, &opt, cpu1);
    const int64_t epoch = std::stoll(meta.at("epoch"));
    fmt::print("loaded: epoch {}, optimizer {} lr {} momentum {}; {} holds {} more bytes (the momentum\n"
               "  buffers) and peaked {} above (the file's tensors were staged there: map_location)\n",
               epoch, meta.at("optim.type"), opt.lr(), opt.options().momentum, cpu1,
               memory_stats(cpu1).allocated_bytes - before, memory_stats(cpu1).peak_bytes - before);

    fmt::print("\n== 4. Resume: epoch {} with the loader at epoch {} ==\n", epoch + 1, epoch);
    data::DataLoader loader(train, lopts);
    loader.set_epoch(epoch);  // the same shuffle the reference's second epoch saw
    auto r = tutorials::train_one_epoch(*model, opt, loader, cpu1, "epoch 2/2 (resumed)");
    fmt::print("epoch 2 (resumed): train loss {:.4f}\n", r.loss);
    const double diff = tutorials::max_abs_param_diff(*model, *ref);
    fmt::print("max |resumed - reference| over all {} parameters: {:.3g}\n",
               235146, diff);
    if (diff > tolerance) {
      fmt::print(stderr, "FAIL: the resumed run differs from the uninterrupted one by {} (> {})\n", diff, tolerance);
      return 1;
    }

    fmt::print("\n== 5. A truncated checkpoint ==\n");
    const std::string bytes = read_file(out);
    const std::string cut = out + ".truncated";
    {
      std::ofstream f(cut, std::ios::binary | std::ios::trunc);
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));  // a copy cut off halfway
    }
    bool refused = false;
    try {
      load_checkpoint(cut, *model, &opt, cpu1);
    } catch (const Error& e) {
      refused = true;
      fmt::print("load_checkpoint(\"{}\") threw:\n  {}\n", cut, e.what());
    }
    fs::remove(cut);
    if (!refused) {
      fmt::print(stderr, "FAIL: a truncated checkpoint loaded without an error\n");
      return 1;
    }
    fmt::print("\nOpen the checkpoint in Python:\n"
               "  from safetensors.torch import load_file\n"
               "  sd = load_file(\"{}\")   # dict of torch tensors: '0.weight', ..., 'optim.state.0.momentum_buffer'\n",
               out);
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
