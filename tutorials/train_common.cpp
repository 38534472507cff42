// train_common.cpp: the loops of train_common.h, and the tutorials' command lines and launch
// block. Nothing here is specific to a model: any Module that maps a batch [B, ...] to class
// scores [B, C] trains with it.
// Read next: 02_train_mlp.cpp (uses all of this), 04_checkpoint.cpp (resumes it).
#include "tutorials/train_common.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "framework/autograd/grad_mode.h"
#include "framework/io/progress.h"
#include "framework/ops/ops.h"
#include "framework/optim/lr_scheduler.h"
#include "parallel/launch/spawn.h"

namespace dplab::tutorials {
namespace {

// Number of rows whose argmax equals the label. logits: [B, C], labels: [B] int64.
// Counted on the host: the [B] predictions are tiny next to the step itself.
int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>();
  std::vector<int64_t> want = labels.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == want[i];
  return correct;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

EpochResult train_one_epoch(nn::Module& model, optim::Optimizer& optimizer,
                            data::DataLoader& loader, Device device, const std::string& desc) {
  model.train();
  const auto t0 = std::chrono::steady_clock::now();
  ProgressBar bar({.total = loader.sampler().size(), .desc = desc, .unit = "samples"});
  double loss_sum = 0;  // sum over examples of the per-example loss
  int64_t correct = 0, seen = 0;
  for (auto& batch : loader) {
    Tensor x = batch.data.to(device);    // [B, 1, 28, 28] host -> device
    Tensor y = batch.target.to(device);  // [B] int64
    const int64_t b = x.size(0);

    optimizer.zero_grad();              // drop last step's gradients (set_to_none)
    Tensor logits = model.forward(x);   // [B, 10]; records the graph
    Tensor loss = cross_entropy(logits, y);  // scalar, mean over the batch
    loss.backward();                    // fills every parameter's .grad
    optimizer.step();                   // p -= lr * (momentum-averaged) grad

    const double l = loss.item();
    DPLAB_CHECK(std::isfinite(l), "training diverged: loss is {} at example {} of {} ({})", l,
                seen, loader.sampler().size(), desc);
    loss_sum += l * static_cast<double>(b);
    correct += count_correct(logits, y);
    seen += b;
    bar.update(b, {{"loss", l}});
  }
  bar.close();
  DPLAB_CHECK(seen > 0, "train_one_epoch: the loader gave no batches ({})", desc);
  return {.loss = loss_sum / static_cast<double>(seen),
          .accuracy = static_cast<double>(correct) / static_cast<double>(seen),
          .seconds = seconds_since(t0),
          .count = seen};
}

EvalResult evaluate(nn::Module& model, data::DataLoader& loader, Device device) {
  const bool was_training = model.is_training();
  model.eval();     // dropout off, batch norm uses running statistics
  NoGradGuard no_grad;  // no graph: activations are freed as soon as the next layer ran
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  for (auto& batch : loader) {
    Tensor x = batch.data.to(device);
    Tensor y = batch.target.to(device);
    Tensor logits = model.forward(x);
    // Sum, not mean, so a smaller last batch is weighted by its size.
    loss_sum += cross_entropy(logits, y, Reduction::Sum).item();
    correct += count_correct(logits, y);
    seen += x.size(0);
  }
  model.train(was_training);
  DPLAB_CHECK(seen > 0, "evaluate: the loader gave no batches");
  return {.loss = loss_sum / static_cast<double>(seen),
          .accuracy = static_cast<double>(correct) / static_cast<double>(seen),
          .count = seen};
}

double max_abs_param_diff(const nn::Module& a, const nn::Module& b) {
  auto pa = a.named_parameters();
  auto pb = b.named_parameters();
  DPLAB_CHECK(pa.size() == pb.size(), "max_abs_param_diff: models differ: {} vs {} parameters",
              pa.size(), pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    DPLAB_CHECK(pa[i].first == pb[i].first && pa[i].second.shape() == pb[i].second.shape(),
                "max_abs_param_diff: parameter {} is {} {} in one model and {} {} in the other",
                i, pa[i].first, shape_str(pa[i].second.shape()), pb[i].first,
                shape_str(pb[i].second.shape()));
    // to_vector copies to the host, so the two models may live on different devices.
    std::vector<float> va = pa[i].second.to_vector<float>();
    std::vector<float> vb = pb[i].second.to_vector<float>();
    for (size_t j = 0; j < va.size(); ++j)
      worst = std::max(worst, std::fabs(static_cast<double>(va[j]) - static_cast<double>(vb[j])));
  }
  return worst;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1000) return fmt::format("{} B", bytes);
  if (bytes < 1000 * 1000) return fmt::format("{:.1f} KB", b / 1e3);
  if (bytes < 1000LL * 1000 * 1000) return fmt::format("{:.2f} MB", b / 1e6);
  return fmt::format("{:.2f} GB", b / 1e9);
}

std::optional<int> parse_train_args(int argc, char** argv, const std::string& title, TrainArgs& a) {
  CLI::App app{title};
  app.add_option("--epochs", a.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--limit", a.limit, "use only the first N training images (0: all 60000)");
  app.add_option("--test-limit", a.test_limit, "use only the first N test images (0: all 10000)");
  app.add_option("--batch-size", a.batch_size)->check(CLI::PositiveNumber);
  app.add_option("--lr", a.lr);
  app.add_option("--momentum", a.momentum);
  app.add_option("--schedule", a.schedule, "lr per epoch: cosine (from --lr down towards 0) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--seed", a.seed, "initial weights and shuffling");
  app.add_option("--device", a.device, "where the model trains; the dataset stays on cpu:0");
  app.add_option("--threads", a.threads, "threads for the CPU kernels")->check(CLI::PositiveNumber);
  app.add_option("--min-accuracy", a.min_accuracy, "exit 1 if the final test accuracy is below this");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

EvalResult train_epochs(nn::Module& model, optim::Optimizer& optimizer, data::DataLoader& train,
                        data::DataLoader& test, Device device, const TrainArgs& a) {
  // The large early steps make fast progress; the small late ones settle into a minimum
  // instead of bouncing around it (--schedule constant ends a few points lower).
  std::unique_ptr<optim::LRScheduler> scheduler;
  if (a.schedule == "cosine")
    scheduler = std::make_unique<optim::CosineAnnealingLR>(optimizer, optim::CosineAnnealingLROptions{.t_max = a.epochs});
  EvalResult last;
  for (int e = 1; e <= a.epochs; ++e) {
    const double epoch_lr = optimizer.lr();
    auto r = train_one_epoch(model, optimizer, train, device, fmt::format("epoch {}/{}", e, a.epochs));
    last = evaluate(model, test, device);
    if (scheduler) scheduler->step();
    fmt::print("epoch {} (lr {:.4f}): train loss {:.4f} acc {:.2f}% ({:.1f} s, {:.0f} samples/s) | test loss {:.4f} acc {:.2f}%\n",
               e, epoch_lr, r.loss, 100 * r.accuracy, r.seconds, static_cast<double>(r.count) / r.seconds,
               last.loss, 100 * last.accuracy);
  }
  return last;
}

int final_accuracy_status(const EvalResult& last, double min_accuracy) {
  fmt::print("\nfinal test accuracy: {:.2f}%\n", 100 * last.accuracy);
  if (last.accuracy >= min_accuracy) return 0;
  fmt::print(stderr, "FAIL: test accuracy {:.2f}% is below --min-accuracy {:.2f}%\n",
             100 * last.accuracy, 100 * min_accuracy);
  return 1;
}

std::optional<int> parse_int_options(int argc, char** argv, const std::string& title,
                                     const std::vector<IntOption>& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s\noptions:\n", title.c_str());
      for (const IntOption& o : options) std::printf("  %-12s N  %s\n", o.name.c_str(), o.help.c_str());
      return 0;
    }
    const IntOption* opt = nullptr;
    for (const IntOption& o : options) opt = o.name == arg ? &o : opt;
    std::string known;
    for (const IntOption& o : options) known += (known.empty() ? "" : ", ") + o.name;
    if (opt == nullptr) {
      std::fprintf(stderr, "%s: unknown option '%s' (expected %s, or --help)\n", argv[0], arg.c_str(),
                   known.c_str());
      return 2;
    }
    const char* v = i + 1 < argc ? argv[++i] : "";
    int64_t n = 0;
    const char* end = v + std::char_traits<char>::length(v);
    const auto [p, ec] = std::from_chars(v, end, n);
    if (*v == '\0' || ec != std::errc() || p != end || n < opt->min || n > opt->max) {
      std::fprintf(stderr, "%s: %s expects an integer in [%lld, %lld], got '%s'\n", argv[0], arg.c_str(),
                   static_cast<long long>(opt->min), static_cast<long long>(opt->max), v);
      return 2;
    }
    opt->set(n);
  }
  return std::nullopt;
}

int run_spawned(const std::string& name, int ranks, const std::function<void(int rank)>& fn,
                const std::string& done) {
  try {
    parallel::spawn(fn, ranks);
    if (!done.empty()) fmt::print("{}\n", done);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace dplab::tutorials
