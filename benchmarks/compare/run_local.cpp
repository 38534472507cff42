// run_local.cpp: the two modes that run in this one process: the single-device baseline and
// DataParallel, the parameter server with a thread per device (parallel/dp/data_parallel.h).
// Both are the same loop (zero_grad, forward on the whole global batch, the workload's loss,
// backward, SGD step); DataParallel only wraps the model, scatters the batch N ways and
// sums the gradients onto the master. Timing starts after cfg.warmup steps; memory peaks
// and traffic counters are reset at that point, so they describe steady-state steps.
// Read next: run_ddp.cpp, the same loop over N processes.
#include <fmt/core.h>

#include <algorithm>
#include <functional>

#include "benchmarks/compare/compare.h"
#include "benchmarks/compare/trace.h"
#include "benchmarks/compare/training.h"
#include "framework/amp/precision.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "parallel/dp/data_parallel.h"

namespace dplab::compare {

namespace {

struct LoopTimes {
  double seconds = 0, forward_s = 0, backward_s = 0, step_s = 0;  // seconds: median step x steps
  int64_t timed_steps = 0;
  int64_t optim_state_bytes = 0;          // the optimizer's state at the end (on the master)
  std::vector<int64_t> activation_bytes;  // per device of `devices`: what forward adds
};

// The training loop both local modes share. `net` is the model or its DataParallel
// wrapper; `on_timing_start` resets the counters when the timed steps begin.
LoopTimes train_loop(const Config& cfg, const Workload& work, nn::Module& net,
                     const std::vector<Device>& devices, const std::string& label,
                     TraceRecorder& trace, const std::function<void()>& on_timing_start) {
  const Device input_device = devices.at(0);
  ActivationMeter activations(devices);
  auto optimizer = make_optimizer(cfg, net.parameters());
  optim::Optimizer& opt = *optimizer;
  TimedSteps timing(cfg, label);
  amp::GradScaler scaler = amp::make_scaler(amp::parse_precision(cfg.precision));  // fp16 only
  LoopTimes t;
  for (int64_t step = 0; step < cfg.steps; ++step) {
    if (timing.is_first_timed(step)) on_timing_start();
    const auto t0 = Clock::now();
    opt.zero_grad();
    const Batch b = work.batch(step, 0, 1, input_device);
    activations.before_forward();
    Tensor loss = work.loss(net.forward(b.x), b.y);
    const float loss_value = loss.item();  // waits for a GPU, so the split below is honest
    if (timing.is_timed(step)) activations.after_forward();
    const auto t1 = Clock::now();
    scaler.scale(loss).backward();
    const auto t2 = Clock::now();
    scaler.step(opt);
    scaler.update();
    const auto t3 = Clock::now();
    trace.add("forward", 0, to_us(t0), to_us(t1));
    trace.add("backward", 0, to_us(t1), to_us(t2));
    trace.add("optimizer step", 0, to_us(t2), to_us(t3));
    if (timing.is_timed(step)) {
      t.forward_s += seconds_between(t0, t1);
      t.backward_s += seconds_between(t1, t2);
      t.step_s += seconds_between(t2, t3);
    }
    timing.end_step(step, seconds_between(t0, t3), loss_value);
  }
  t.timed_steps = timing.count();
  t.seconds = timing.finish();
  t.optim_state_bytes = optimizer_state_bytes(opt);
  for (size_t i = 0; i < devices.size(); ++i) t.activation_bytes.push_back(activations.bytes(i));
  return t;
}

void finish(const Config& cfg, RunResult& r, nn::Module& model, const Workload& work, Device dev,
            const TraceRecorder& trace) {
  const Evaluation ev = work.evaluate(model, dev);
  r.test_accuracy = ev.accuracy;
  r.test_loss = ev.loss;
  const std::vector<float> params = flat_params(model);
  r.param_count = static_cast<int64_t>(params.size());
  write_params(run_file(cfg, r.mode, r.n, -1, "params"), params);
  trace.write_fragment(run_file(cfg, r.mode, r.n, -1, "trace"));
}

}  // namespace

RunResult run_single(const Config& cfg) {
  const std::unique_ptr<Workload> work = make_workload(cfg);
  const Device dev = device_of(cfg, 0);
  auto model = initial_model(cfg);
  model->to(dev);
  TraceRecorder trace(cfg.trace);
  LoopTimes t = train_loop(cfg, *work, *model, {dev}, "single N=1", trace,
                           [&] { reset_peak_memory_stats(dev); });
  RunResult r{.mode = "single",
              .n = 1,
              .steps = cfg.steps,
              .timed_steps = t.timed_steps,
              .global_batch = cfg.global_batch,
              .seconds = t.seconds};
  // One device computes everything: no communication, nothing to wait for.
  r.compute_s = t.seconds / double(t.timed_steps);
  r.devices = {DeviceFigures{.peak_bytes = memory_stats(dev).peak_bytes}};
  fill_memory(r.devices[0], model->parameters(), t.optim_state_bytes, 0);
  r.devices[0].activation_bytes = t.activation_bytes[0];
  finish(cfg, r, *model, *work, dev, trace);
  return r;
}

RunResult run_data_parallel(const Config& cfg, int n) {
  const std::unique_ptr<Workload> work = make_workload(cfg);
  std::vector<Device> devices;
  for (int k = 0; k < n; ++k) devices.push_back(device_of(cfg, k));
  auto model = initial_model(cfg);
  model->to(devices[0]);
  parallel::DataParallel dp(model, devices);
  dp.emulate_links(link_gbps(cfg, "dp", n));
  TraceRecorder trace(cfg.trace);
  LoopTimes t = train_loop(cfg, *work, dp, devices, fmt::format("dp N={}", n), trace,
                           [&] { dp.reset_stats(); });

  RunResult r{.mode = "dp",
              .n = n,
              .steps = cfg.steps,
              .timed_steps = t.timed_steps,
              .global_batch = cfg.global_batch,
              .seconds = t.seconds};
  const std::vector<parallel::DeviceLoad> load = dp.load();
  const parallel::TrafficMatrix& tm = dp.traffic();
  using parallel::DpPhase;
  double busy = 0, worker_idle = 0;
  for (int i = 0; i < n; ++i) {
    const parallel::DeviceLoad& l = load[static_cast<size_t>(i)];
    busy += l.busy_seconds;
    if (i > 0) worker_idle += l.idle_seconds;
    // Weights: the master sends P to each replica (Replicate) and receives P back from each
    // (Reduce); a worker receives P and sends P. Everything else is the batch and its outputs.
    r.devices.push_back({.peak_bytes = l.peak_bytes,
                         .bytes_sent = l.bytes_out,
                         .bytes_received = l.bytes_in,
                         .weight_bytes_sent = tm.phase_bytes_out(DpPhase::Replicate, i) +
                                              tm.phase_bytes_out(DpPhase::Reduce, i),
                         .weight_bytes_received = tm.phase_bytes_in(DpPhase::Replicate, i) +
                                                  tm.phase_bytes_in(DpPhase::Reduce, i)});
  }
  // memory: the master holds the model, its gradients and the optimizer state; a worker's
  // replica (kept from step to step) holds a copy of the weights and their gradients
  fill_memory(r.devices[0], model->parameters(), t.optim_state_bytes, 0);
  r.devices[0].activation_bytes = t.activation_bytes[0];
  for (int i = 1; i < n; ++i) {
    DeviceFigures& w = r.devices[static_cast<size_t>(i)];
    w.param_bytes = w.grad_bytes = r.devices[0].param_bytes;
    w.activation_bytes = t.activation_bytes[static_cast<size_t>(i)];
  }
  // compute: a device's mean busy time; communication: the master's copies; waiting: the
  // workers' mean idle time, i.e. how long the replicas stand still while the master
  // gathers, reduces and steps alone (the parameter server's serialisation).
  const double steps = double(t.timed_steps);
  r.compute_s = busy / n / steps;
  r.comm_s = tm.copy_seconds(0) / steps;
  r.wait_s = n > 1 ? worker_idle / (n - 1) / steps : 0.0;
  finish(cfg, r, dp.module(), *work, devices[0], trace);
  return r;
}

}  // namespace dplab::compare
