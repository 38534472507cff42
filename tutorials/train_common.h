// train_common.h: what the tutorials share, written once so each tutorial can show what is
// new in it (memory, convolutions, checkpoints, DDP):
//   one step:   zero_grad -> forward -> loss -> backward -> step   (train_one_epoch)
//   evaluation: model.eval() + NoGradGuard, accuracy and mean loss   (evaluate)
//   02 and 03:  their command line (TrainArgs) and their epochs with a cosine lr (train_epochs)
//   the tutorials that start their own ranks: a few integer options (parse_int_options) and
//               the launch block (run_spawned)
// The dataset lives on the host (cpu:0); each batch is copied to `device` before the step,
// exactly as a GPU program copies batches to cuda:0.
// Read next: 02_train_mlp.cpp, then train_common.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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

// ---- tutorials 02 and 03: the command line and the epochs ----
struct TrainArgs {
  int epochs = 5;
  int64_t limit = 0;       // training images (0: all 60000)
  int64_t test_limit = 0;  // test images (0: all 10000)
  int64_t batch_size = 64;
  double lr = 0.1, momentum = 0.9;
  std::string schedule = "cosine";  // or "constant"
  uint64_t seed = 0;
  std::string device = "cpu:1";  // where the model trains; the dataset stays on cpu:0
  int threads = 1;
  double min_accuracy = 0.0;     // exit 1 below it (the tests' sanity bound)
};
// Parses --epochs, --limit, --test-limit, --batch-size, --lr, --momentum, --schedule, --seed,
// --device, --threads and --min-accuracy into `args` (which holds the defaults). Returns the
// exit status when the program should stop (--help, or a bad value, said on stderr), else
// nullopt. (CLI11 stays in train_common.cpp: it is slow to compile.)
std::optional<int> parse_train_args(int argc, char** argv, const std::string& title, TrainArgs& args);

// args.epochs epochs of train_one_epoch, each followed by an evaluation and one printed line;
// the lr follows cosine annealing, base * (1 + cos(pi * epoch / epochs)) / 2, set once per
// epoch, unless args.schedule is "constant". Returns the last evaluation.
EvalResult train_epochs(nn::Module& model, optim::Optimizer& optimizer, data::DataLoader& train,
                        data::DataLoader& test, Device device, const TrainArgs& args);

// Prints the final test accuracy; 1 (after saying so) if it is below min_accuracy, else 0.
int final_accuracy_status(const EvalResult& last, double min_accuracy);

// ---- the tutorials that start their own ranks ----
// One integer option: `--name value` sets *value (an int or an int64_t), which must lie in
// [min, max].
struct IntOption {
  std::string name;
  std::function<void(int64_t)> set;
  std::string help;
  int64_t min = 0, max = int64_t{1} << 40;
  template <typename T>
  IntOption(std::string n, T* value, std::string h, int64_t lo = 0, int64_t hi = int64_t{1} << 40)
      : name(std::move(n)), set([value](int64_t v) { *value = static_cast<T>(v); }),
        help(std::move(h)), min(lo), max(hi) {}
};
// Reads `--name value` pairs into the options (--help lists them). Returns the exit status
// when the program should stop (--help: 0; an unknown option, a missing or malformed value,
// or one out of range: 2, said on stderr), else nullopt.
std::optional<int> parse_int_options(int argc, char** argv, const std::string& title,
                                     const std::vector<IntOption>& options);

// The launch block: runs fn(rank) on `ranks` processes (parallel::spawn re-executes this
// program, so main() runs again in each child), then, in the parent, prints `done` (when not
// empty). Any error becomes "name: what" on stderr and exit status 1; else 0.
int run_spawned(const std::string& name, int ranks, const std::function<void(int rank)>& fn,
                const std::string& done = "");

}  // namespace dplab::tutorials
