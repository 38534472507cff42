// training.h: what every mode of dplab-compare shares, so that only the parallel part differs:
// the data, loss and evaluation (a Workload, workload.h: Fashion-MNIST images, or text for
// --model gpt), the initial model (one seed), the flat parameter vector the test compares, a
// clock and the timed steps. Step k sees the same samples in every mode; a device / rank of N
// gets its N-th of them.
// Read next: workload.h, run_local.cpp (the baseline loop), trace.h.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/compare/compare.h"
#include "benchmarks/compare/workload.h"
#include "framework/io/progress.h"
#include "framework/nn/module.h"
#include "framework/tensor/tensor.h"

namespace dplab::compare {

// The model every mode starts from: manual_seed(cfg.seed), then models::make_model (for gpt:
// a models::GPT of gpt_config(cfg)), then cast to 16 bits for --precision fp16 / bf16 (Apex O2).
std::shared_ptr<nn::Module> initial_model(const Config& cfg);
// The dtype of the model's inputs and weights: float32, float16 or bfloat16 (--precision).
DType model_dtype(const Config& cfg);

std::vector<float> flat_params(const nn::Module& model);

// A step's activations on each device: what forward added (allocated after it minus before
// it). At the end of forward every activation backward needs is alive, and backward has not
// yet made anything, so this is their peak. The largest over the steps measured is kept.
class ActivationMeter {
 public:
  explicit ActivationMeter(std::vector<Device> devices);
  void before_forward();
  void after_forward();
  int64_t bytes(size_t device_index) const { return peak_.at(device_index); }

 private:
  std::vector<Device> devices_;
  std::vector<int64_t> before_, peak_;
};

// The median of per-step times: the step time every mode reports. On a shared machine other
// processes' bursts land on random steps; the median ignores them, the mean does not.
double median(std::vector<double> v);

// The timed steps of a run, the same in every mode: the first cfg.warmup steps (at most all
// but the last) are left out while allocations and caches settle; each later step's seconds
// are kept, and the run's time is the median step x the timed steps. It also draws the run's
// progress bar (one bar per run: ranks other than 0 pass show_bar = false).
//   TimedSteps timing(cfg, "ring N=4", rank == 0);
//   for (step ...) { if (timing.is_first_timed(step)) reset the counters; ...;
//                    timing.end_step(step, seconds_between(t0, t3), loss_value); }
//   r.timed_steps = timing.count(); r.seconds = timing.finish();
class TimedSteps {
 public:
  TimedSteps(const Config& cfg, const std::string& bar_label, bool show_bar = true);
  // The step where timing starts: reset memory peaks and traffic counters before it runs.
  bool is_first_timed(int64_t step) const { return step == timed_from_; }
  bool is_timed(int64_t step) const { return step >= timed_from_; }
  // Keeps the step's seconds if it is timed, and moves the bar on, showing its loss.
  void end_step(int64_t step, double seconds, float loss);
  int64_t count() const { return static_cast<int64_t>(step_seconds_.size()); }
  // Closes the bar; the run's time: the median step x the timed steps.
  double finish();

 private:
  int64_t timed_from_;
  ProgressBar bar_;
  std::vector<double> step_seconds_;
};

using Clock = std::chrono::steady_clock;
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
// Microseconds on the monotonic clock, the same in every process of the machine (trace).
inline double to_us(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}
inline double now_us() { return to_us(Clock::now()); }

}  // namespace dplab::compare
