// Tutorial 19: gradient checkpointing, memory for compute.
// What you will learn:
//   - why backward needs memory: every Linear keeps its input, every ReLU its output, so a
//     deep network's activations all stay alive until backward reaches them;
//   - checkpoint_sequential(seq, S, x): keep only the S-1 segment boundaries, run each
//     segment's forward again in backward; the peak falls from 2L to S-1 + 2L/S activations;
//   - the price, measured: about one more forward of the checkpointed segments per step;
//   - that the gradients are exactly (bit for bit) those without checkpointing.
// Run: 19_gradient_checkpointing [--depth 16] [--width 512] [--batch 256] [--steps 9].
// Read 19_gradient_checkpointing.md.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "framework/dplab.h"
#include "framework/nn/grad_checkpoint.h"
#include "models/mlp.h"

using namespace dplab;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Measured {
  int64_t peak = 0;                         // bytes above the start of the step
  std::vector<double> forward, backward;    // ms per step
  std::vector<std::vector<float>> grads;    // of the last step
};

// One step of sum(seq(x)) with S segments. The gradients exist already (backward adds into
// them), so the peak above the start is activations and backward's buffers.
void one_step(nn::Sequential& seq, const Tensor& x, int segments, Device d, Measured& m, bool timed) {
  for (const Tensor& p : seq.parameters()) p.grad().zero_();
  const int64_t base = memory_stats(d).allocated_bytes;
  reset_peak_memory_stats(d);
  auto t0 = Clock::now();
  Tensor loss = sum(checkpoint_sequential(seq, segments, x));
  const double f = ms_since(t0);
  t0 = Clock::now();
  loss.backward();
  const double b = ms_since(t0);
  if (!timed) return;
  m.peak = std::max(m.peak, memory_stats(d).peak_bytes - base);
  m.forward.push_back(f);
  m.backward.push_back(b);
  m.grads.clear();
  for (const Tensor& p : seq.parameters()) m.grads.push_back(p.grad().to_vector<float>());
}

}  // namespace

int run(int argc, char** argv) {
  int depth = 16, steps = 9;
  int64_t width = 512, batch = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--depth")) depth = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--width")) width = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
  }
  if (depth < 4 || depth % 4 != 0 || width < 1 || batch < 1 || steps < 1) {
    fmt::print(stderr, "19_gradient_checkpointing: --depth must be a multiple of 4, the rest positive\n");
    return 2;
  }
  // L blocks of Linear(W, W) + ReLU on their own logical device, so its counter is theirs
  const Device d("cpu:1");
  manual_seed(0);
  auto seq = models::linear_relu_stack(depth, width);
  seq->to(d);
  Tensor x = randn({batch, width}).to(d);
  sum(seq->forward(x)).backward();  // makes the gradients, which later steps add into
  const int64_t act = batch * width * 4;
  fmt::print("{} blocks of Linear({}, {}) + ReLU, batch {}: one activation (B x W floats) = {:.2f} MiB\n",
             depth, width, width, batch, act / 1048576.0);
  fmt::print("each block keeps 2 for backward (the Linear's input, the ReLU's output)\n\n");
  fmt::print("{:>8} {:>13} {:>13} {:>10} {:>11} {:>9} {:>13} {:>10}\n", "segments", "predicted act",
             "peak (act)", "peak MiB", "forward ms", "backward", "extra vs 0", "(S-1)/S F");
  // the three settings take turns, step after step, so a slow minute of this shared
  // machine slows all three alike; each figure is the median over the steps
  const std::vector<int> settings{0, 2, 4};
  std::vector<Measured> m(settings.size());
  for (int s = 0; s <= steps; ++s)  // step 0 warms up
    for (size_t k = 0; k < settings.size(); ++k) one_step(*seq, x, settings[k], d, m[k], s > 0);
  bool ok = true;
  const double f0 = median(m[0].forward), b0 = median(m[0].backward);
  for (size_t k = 0; k < settings.size(); ++k) {
    const int segments = settings[k];
    // no checkpointing keeps all 2L; S segments keep S-1 boundaries, then one segment's 2L/S
    const int predicted = segments == 0 ? 2 * depth : segments - 1 + 2 * depth / segments;
    const double f = median(m[k].forward), b = median(m[k].backward);
    const double one_more = segments == 0 ? 0.0 : f0 * (segments - 1) / segments;
    fmt::print("{:>8} {:>13} {:>13.2f} {:>10.1f} {:>11.1f} {:>9.1f} {:>10.1f} ms {:>7.1f} ms\n", segments,
               predicted, double(m[k].peak) / double(act), m[k].peak / 1048576.0, f, b, segments == 0 ? 0.0 : f + b - f0 - b0, one_more);
    // the claims of the .md: the peak is the prediction plus a few buffers; gradients equal
    ok = ok && m[k].peak >= predicted * act && m[k].peak <= (predicted + 4) * act + 4096;
    ok = ok && m[k].grads == m[0].grads;
  }
  fmt::print("\ngradients with 2 and 4 segments: {} those without checkpointing\n",
             ok ? "bit for bit equal to" : "NOT equal to (or a peak off its prediction)");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // bad arguments, DPLAB_DEVICE_MEMORY too small, ...
    fmt::print(stderr, "19_gradient_checkpointing: {}\n", e.what());
    return 1;
  }
}
