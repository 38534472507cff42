// train_common.h: the training loop the tutorials 02-04 share, written once so each
// tutorial can show what is new in it (memory, convolutions, checkpoints).
//   one step:   zero_grad -> forward -> loss -> backward -> step   (train_one_epoch)
//   evaluation: model.eval() + NoGradGuard, accuracy and mean loss   (evaluate)
// The dataset lives on the host (cpu:0); each batch is copied to `device` before the step,
// exactly as a GPU program copies batches to cuda:0.
// Read next: 02_train_mlp.cpp, then train_common.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "framework/data/dataloader.h"
#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"
#include "framework/tensor/device.h"

namespace dplab::tutorials {

struct EvalResult {
  double loss = 0;      // mean cross-entropy per example
  double accuracy = 0;  // fraction in [0, 1]
  int64_t count = 0;    // examples seen
};

struct EpochResult {
  double loss = 0;      // mean training loss per example over the epoch
  double accuracy = 0;  // training accuracy (of the batches as they were trained on)
  double seconds = 0;
  int64_t count = 0;
};

// One pass over `loader`: per batch, zero_grad, forward, cross_entropy, backward, step.
// `desc` labels the progress bar ("epoch 1/5"); the bar prints plain lines when stdout is
// not a terminal. Throws Error if the loss becomes NaN or infinite (diverged training).
EpochResult train_one_epoch(nn::Module& model, optim::Optimizer& optimizer,
                            data::DataLoader& loader, Device device, const std::string& desc);

// Accuracy and mean loss over `loader` in eval mode with no graph recorded; restores the
// module's training flag afterwards.
EvalResult evaluate(nn::Module& model, data::DataLoader& loader, Device device);

// The largest |a - b| over all parameters of two models with the same structure
// (names must match one for one; throws otherwise). Used to compare training runs.
double max_abs_param_diff(const nn::Module& a, const nn::Module& b);

// "940.6 KB", "1.23 MB": decimal units, as memory figures are printed in the tutorials.
std::string format_bytes(int64_t bytes);

}  // namespace dplab::tutorials
