// workload.cpp: the two workloads of dplab-compare (workload.h). Images: global batch k is
// rows [k*G, (k+1)*G) of the training subset (cycled), part r of N its rows
// [k*G + r*G/N, k*G + (r+1)*G/N). Text: global batch k is G windows of block_size bytes
// whose starts a generator seeded with k draws, part r of N the windows r, r+N, r+2N, ...
// (TextCorpus's RankShare): the same G windows in every mode, whatever N.
// Read next: training.cpp.
#include "benchmarks/compare/workload.h"

#include <fmt/core.h>

#include <algorithm>
#include <vector>

#include "benchmarks/compare/training.h"
#include "datasets/fashion_mnist.h"
#include "datasets/text_corpus.h"
#include "framework/autograd/grad_mode.h"
#include "framework/error.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "models/models.h"

namespace dplab::compare {

namespace {

Device data_device(const Config& cfg) {
  return cfg.device == "cpu" ? Device(DeviceKind::CPU, kDataDeviceIndex)
                             : Device(DeviceKind::CPU, 0);
}

int64_t part_size(const Config& cfg, int parts) {
  DPLAB_CHECK(cfg.global_batch % parts == 0,
              "global batch {} does not split evenly over {} devices", cfg.global_batch, parts);
  return cfg.global_batch / parts;
}

// Correct predictions and the summed cross-entropy of logits [M, C] against targets [M].
std::pair<double, double> score(const Tensor& logits, const Tensor& targets) {
  const Device host(DeviceKind::CPU, 0);
  const double loss_sum = double(cross_entropy(logits, targets, Reduction::Sum).to(host).item());
  const std::vector<int64_t> predicted = argmax(logits, 1).to(host).to_vector<int64_t>();
  const std::vector<int64_t> truth = targets.to(host).to_vector<int64_t>();
  double correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i] ? 1 : 0;
  return {correct, loss_sum};
}

class ImageWorkload : public Workload {
 public:
  explicit ImageWorkload(const Config& cfg) : cfg_(cfg) {
    datasets::FashionMNIST train("train", {.root = cfg.data_root, .limit = cfg.train_limit});
    datasets::FashionMNIST test("test", {.root = cfg.data_root, .limit = cfg.test_limit});
    const Device host = data_device(cfg);
    train_x_ = train.data().to(host), train_y_ = train.targets().to(host);
    test_x_ = test.data().to(host), test_y_ = test.targets().to(host);
    batches_ = train_x_.size(0) / cfg.global_batch;
    DPLAB_CHECK(batches_ >= 1,
                "the training subset has {} examples, fewer than one global batch of {}",
                train_x_.size(0), cfg.global_batch);
  }

  Batch batch(int64_t step, int part, int parts, Device device) const override {
    const int64_t per = part_size(cfg_, parts);
    const int64_t start = (step % batches_) * cfg_.global_batch + part * per;
    return {train_x_.narrow(start, per).to(device).to(model_dtype(cfg_)),
            train_y_.narrow(start, per).to(device)};
  }

  Tensor loss(const Tensor& output, const Tensor& y) const override {
    return cross_entropy(output.to(DType::Float32), y);
  }

  Evaluation evaluate(nn::Module& model, Device device) const override {
    const bool was_training = model.is_training();
    model.eval();
    NoGradGuard no_grad;
    const int64_t n = test_x_.size(0);
    const DType dtype = model.parameters().empty() ? DType::Float32 : model.parameters()[0].dtype();
    double loss_sum = 0, correct = 0;
    for (int64_t start = 0; start < n; start += 500) {
      const int64_t len = std::min<int64_t>(500, n - start);
      Tensor logits = model.forward(test_x_.narrow(start, len).to(device).to(dtype));
      const auto [c, l] = score(logits.to(DType::Float32), test_y_.narrow(start, len).to(device));
      correct += c, loss_sum += l;
    }
    model.train(was_training);
    return {100.0 * correct / double(n), loss_sum / double(n)};
  }

 private:
  Config cfg_;
  Tensor train_x_, train_y_;  // [M, 1, 28, 28] float32, [M] int64 on the data device
  Tensor test_x_, test_y_;
  int64_t batches_ = 0;  // M / G whole global batches, cycled
};

class TextWorkload : public Workload {
 public:
  // Validation windows: --test-limit of them, drawn once with this seed, so every mode
  // scores the same bytes.
  static constexpr uint64_t kValSeed = 20260;
  static constexpr int64_t kEvalChunk = 8;  // windows per evaluation forward

  explicit TextWorkload(const Config& cfg)
      : cfg_(cfg), block_(gpt_config(cfg).block_size), corpus_({.path = cfg.data_root}) {
    Generator rng(kValSeed);
    const datasets::TokenBatch val =
        corpus_.sample_batch(datasets::TextSplit::Val, rng, cfg.test_limit, block_);
    val_x_ = val.x.to(data_device(cfg)), val_y_ = val.y.to(data_device(cfg));
  }

  // The generator of batch `step` starts from the step's own seed: every rank of every mode
  // draws the same G window starts, whatever steps it ran before.
  Batch batch(int64_t step, int part, int parts, Device device) const override {
    const int64_t per = part_size(cfg_, parts);
    Generator rng(static_cast<uint64_t>(step) + 1);
    const datasets::TokenBatch b = corpus_.sample_batch(
        datasets::TextSplit::Train, rng, per, block_, {.rank = part, .world_size = parts});
    return {b.x.to(device), b.y.to(device)};
  }

  Tensor loss(const Tensor& output, const Tensor& y) const override {
    return models::lm_loss(output.to(DType::Float32), y);
  }

  Evaluation evaluate(nn::Module& model, Device device) const override {
    const bool was_training = model.is_training();
    model.eval();
    NoGradGuard no_grad;
    const int64_t n = val_x_.size(0);
    double loss_sum = 0, correct = 0;
    for (int64_t start = 0; start < n; start += kEvalChunk) {
      const int64_t len = std::min<int64_t>(kEvalChunk, n - start);
      Tensor logits = model.forward(val_x_.narrow(start, len).to(device)).to(DType::Float32);
      const int64_t vocab = logits.size(2);
      const auto [c, l] =
          score(reshape(logits, {-1, vocab}), reshape(val_y_.narrow(start, len).to(device), {-1}));
      correct += c, loss_sum += l;
    }
    model.train(was_training);
    const double predictions = double(n * block_);
    return {100.0 * correct / predictions, loss_sum / predictions};
  }

 private:
  Config cfg_;
  int64_t block_;
  datasets::TextCorpus corpus_;
  Tensor val_x_, val_y_;  // [test_limit, block] int64 on the data device
};

}  // namespace

models::GPTConfig gpt_config(const Config& cfg) {
  models::GPTConfig c = models::byte_gpt_config();
  if (cfg.n_layer > 0) c.n_layer = cfg.n_layer;
  if (cfg.n_head > 0) c.n_head = cfg.n_head;
  if (cfg.n_embd > 0) c.n_embd = cfg.n_embd;
  if (cfg.block_size > 0) c.block_size = cfg.block_size;
  DPLAB_CHECK(c.n_embd % c.n_head == 0, "--n-embd {} does not split into --n-head {} heads",
              c.n_embd, c.n_head);
  return c;
}

std::unique_ptr<Workload> make_workload(const Config& cfg) {
  if (cfg.model == "gpt") return std::make_unique<TextWorkload>(cfg);
  return std::make_unique<ImageWorkload>(cfg);
}

}  // namespace dplab::compare
