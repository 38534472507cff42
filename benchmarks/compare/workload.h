// workload.h: what dplab-compare trains on, the one place images and text differ. Every mode
// asks its Workload for part r of N of global batch k, takes the loss of the model's output
// with it, and evaluates the final model through it; the parallel part never looks inside.
//   images (mlp, cnn, resnet, toy, wide_mlp): a Fashion-MNIST subset cut into fixed global
//       batches, cross_entropy(model(x), y), accuracy on the test subset.
//   text (gpt): windows of a byte-level corpus (datasets/text_corpus.h), models::lm_loss of
//       model(ids) against the next bytes, next-byte accuracy on fixed validation windows.
// Either way part r of N of batch k holds exactly the rows the single device's batch k gives
// to that part, so every mode computes the same gradient.
// Read next: training.h (the loop every mode shares), run_local.cpp.
#pragma once
#include <memory>

#include "benchmarks/compare/compare.h"
#include "framework/nn/module.h"
#include "framework/tensor/tensor.h"
#include "models/gpt.h"

namespace dplab::compare {

// With --device cpu the data sits on kDataDevice, a logical device no run trains on, so the
// dataset's bytes are not counted as device 0's memory (they are the host's data loader's);
// each device's peak then holds only what the mode itself puts there.
inline constexpr int kDataDeviceIndex = 63;

// One part of a global batch, on the training device: inputs in the model's input dtype
// (images: float32 or --precision's; text: int64 byte ids) and their targets (int64).
struct Batch {
  Tensor x, y;
};

struct Evaluation {
  double accuracy = 0;  // percent: of images classified right, or of next bytes predicted
  double loss = 0;      // mean cross-entropy per image / per predicted byte
};

class Workload {
 public:
  virtual ~Workload() = default;
  // Part `part` of `parts` of global batch `step` (parts = 1: the whole batch) on `device`.
  // Throws when the global batch does not split evenly over `parts`.
  virtual Batch batch(int64_t step, int part, int parts, Device device) const = 0;
  // The step's mean loss, float32, from the model's output for batch(...).x and its y.
  virtual Tensor loss(const Tensor& output, const Tensor& y) const = 0;
  // Eval mode, no grad, the held-out data on `device`.
  virtual Evaluation evaluate(nn::Module& model, Device device) const = 0;
};

// The workload of cfg.model: text for "gpt", images for the others. Throws when the data is
// missing (the message says where it looked and what to install) or too small for a batch.
std::unique_ptr<Workload> make_workload(const Config& cfg);

// --model gpt: models::byte_gpt_config() with the shape options (--n-layer, --n-head,
// --n-embd, --block-size) that were given.
models::GPTConfig gpt_config(const Config& cfg);

}  // namespace dplab::compare
