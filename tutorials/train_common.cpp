// train_common.cpp: the loops of train_common.h. Nothing here is specific to a model:
// any Module that maps a batch [B, ...] to class scores [B, C] trains with it.
// Read next: 02_train_mlp.cpp (uses all of this), 04_checkpoint.cpp (resumes it).
#include "tutorials/train_common.h"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "framework/autograd/grad_mode.h"
#include "framework/io/progress.h"
#include "framework/ops/ops.h"

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

}  // namespace dplab::tutorials
