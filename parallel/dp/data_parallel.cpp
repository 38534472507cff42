// data_parallel.cpp: the parameter server in one process (see data_parallel.h).
#include "parallel/dp/data_parallel.h"

#include <exception>

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "parallel/dp/device_workers.h"

namespace dplab::parallel {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Makes dst use src's memory (same values, no copy): replica 0 and the master share weights.
void share_storage(const Tensor& dst, const Tensor& src) {
  dst.impl().storage = src.impl().storage;
  dst.impl().offset = src.impl().offset;
}

// Gives dst fresh memory of its own on device d (the values are filled by the next broadcast).
void own_storage_on(const Tensor& dst, Device d) {
  Tensor fresh = Tensor::empty(dst.shape(), {.dtype = dst.dtype(), .device = d});
  dst.impl().storage = fresh.impl().storage;
  dst.impl().offset = 0;
}

// The module's make_empty_copy() initialises fresh weights, drawing from the default
// generator; restore its state so wrapping a model in DataParallel does not change the
// random numbers a single-device run would see.
std::shared_ptr<nn::Module> structural_copy(const nn::Module& m) {
  Generator saved;
  {
    std::lock_guard lock(default_generator_mutex());
    saved = default_generator();
  }
  auto copy = m.make_empty_copy();
  std::lock_guard lock(default_generator_mutex());
  default_generator() = saved;
  return copy;
}

// Runs fn(i) for every i on the worker thread of device i (the caller's grad mode comes
// along); rethrows the first failure naming the device. Each worker first waits for the
// copies into its device (emulated links only). Returns each worker's busy seconds, not
// counting that wait.
template <typename Fn>
std::vector<double> run_parallel(DeviceWorkers& workers, size_t n,
                                 const std::vector<Device>& devices, TrafficMatrix& traffic,
                                 Fn fn) {
  std::vector<double> busy(n, 0.0);
  std::vector<std::exception_ptr> errors = workers.run(n, [&](size_t i) {
    traffic.wait_for_arrivals(devices[i]);  // a replica starts once its inputs have arrived
    auto start = Clock::now();
    try {
      fn(i);
    } catch (...) {
      busy[i] = seconds_since(start);
      throw;
    }
    busy[i] = seconds_since(start);
  });
  for (size_t i = 0; i < n; ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      DPLAB_FAIL("DataParallel: the replica on {} failed: {}", devices[i], e.what());
    }
  }
  return busy;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids,
                           std::optional<Device> output_device, int64_t dim)
    : module_(std::move(module)), devices_(std::move(device_ids)),
      output_device_(devices_.empty() ? Device() : output_device.value_or(devices_[0])), dim_(dim),
      traffic_(devices_) {
  DPLAB_CHECK(module_ != nullptr, "DataParallel: the module is null");
  DPLAB_CHECK(!devices_.empty(), "DataParallel: device_ids is empty; give at least one device");
  for (size_t i = 0; i < devices_.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      DPLAB_CHECK(devices_[i] != devices_[j], "DataParallel: device {} appears twice in device_ids",
                  devices_[i]);
    try {
      Tensor::empty({1}, {.device = devices_[i]});  // does the device exist?
    } catch (const Error& e) {
      DPLAB_FAIL("DataParallel: device {} is not usable: {}", devices_[i], e.what());
    }
  }
  Device master = devices_[0];
  for (const auto& [name, t] : module_->named_parameters())
    DPLAB_CHECK(t.device() == master,
                "DataParallel: the module must be on device_ids[0] = {} before "
                "wrapping, but parameter {} is on {} (call module->to(\"{}\") first)",
                master, name, t.device(), master);
  for (const auto& [name, t] : module_->named_buffers())
    DPLAB_CHECK(t.device() == master,
                "DataParallel: the module must be on device_ids[0] = {} before "
                "wrapping, but buffer {} is on {} (call module->to(\"{}\") first)",
                master, name, t.device(), master);
  register_module("module", module_);

  for (size_t i = 0; i < devices_.size(); ++i) {
    auto replica = structural_copy(*module_);
    auto master_params = module_->parameters(), params = replica->parameters();
    auto master_bufs = module_->buffers(), bufs = replica->buffers();
    for (size_t k = 0; k < params.size(); ++k) {
      if (i == 0) share_storage(params[k], master_params[k]);
      else own_storage_on(params[k], devices_[i]);
    }
    for (size_t k = 0; k < bufs.size(); ++k) {
      if (i == 0) share_storage(bufs[k], master_bufs[k]);
      else own_storage_on(bufs[k], devices_[i]);
    }
    replicas_.push_back(replica);
  }
  replica_seconds_.assign(devices_.size(), 0.0);
  workers_ = std::make_unique<DeviceWorkers>(devices_.size());
}

DataParallel::~DataParallel() = default;

std::string DataParallel::name() const {
  return fmt::format("DataParallel(devices=[{}], output_device={}, dim={})",
                     fmt::join(devices_, ", "), output_device_, dim_);
}

// The parameter server's broadcast: master weights (and buffers) into every other replica.
void DataParallel::broadcast_weights() {
  NoGradGuard no_grad;
  auto master_params = module_->parameters();
  auto master_bufs = module_->buffers();
  for (size_t i = 1; i < replicas_.size(); ++i) {
    auto params = replicas_[i]->parameters();
    auto bufs = replicas_[i]->buffers();
    for (size_t k = 0; k < params.size(); ++k) {
      auto start = Clock::now();
      params[k].copy_(master_params[k]);
      traffic_.count(devices_[0], devices_[i], params[k].nbytes(), seconds_since(start),
                     DpPhase::Replicate);
    }
    for (size_t k = 0; k < bufs.size(); ++k) {
      auto start = Clock::now();
      bufs[k].copy_(master_bufs[k]);
      traffic_.count(devices_[0], devices_[i], bufs[k].nbytes(), seconds_since(start),
                     DpPhase::ReplicateBuffers);
    }
  }
  for (auto& r : replicas_) r->train(module_->is_training());
}

Tensor DataParallel::forward(const Tensor& input) {
  check_defined("DataParallel", input);
  int64_t d = normalize_dim("DataParallel", dim_, input.dim());
  DPLAB_CHECK(input.size(d) > 0,
              "DataParallel: the input has size 0 along dim {} (shape {}): nothing to "
              "scatter",
              d, shape_str(input.shape()));
  {
    std::lock_guard lock(stats_mutex_);
    if (!window_open_) window_start_ = Clock::now(), window_open_ = true;
  }
  broadcast_weights();

  // Scatter: Tensor.chunk's split, one chunk per device (fewer when the batch is small).
  std::vector<Tensor> chunks = chunk(input.detach(), static_cast<int64_t>(devices_.size()), d);
  size_t n = chunks.size();
  bool input_needs_grad = grad_enabled() && input.requires_grad();
  std::vector<Tensor> inputs(n), outputs(n);
  std::vector<int64_t> sizes(n);
  for (size_t i = 0; i < n; ++i) {
    sizes[i] = chunks[i].size(d);
    inputs[i] = traffic_.counted_copy(chunks[i], devices_[i], DpPhase::Scatter).detach();
    if (input_needs_grad) inputs[i].requires_grad_(true);
  }

  auto wait_start = Clock::now();
  auto busy = run_parallel(*workers_, n, devices_, traffic_,
                           [&](size_t i) { outputs[i] = replicas_[i]->forward(inputs[i]); });
  double waited = seconds_since(wait_start);

  // Gather onto the output device.
  std::vector<Tensor> gathered;
  for (size_t i = 0; i < n; ++i) {
    DPLAB_CHECK(outputs[i].dim() > d,
                "DataParallel: a replica returned shape {}, which has no dim {} to "
                "gather along",
                shape_str(outputs[i].shape()), d);
    gathered.push_back(traffic_.counted_copy(outputs[i], output_device_, DpPhase::Gather).detach());
  }
  traffic_.wait_for_arrivals(output_device_);
  Tensor out = n == 1 ? gathered[0] : cat(gathered, d);
  {
    std::lock_guard lock(stats_mutex_);
    for (size_t i = 0; i < n; ++i) replica_seconds_[i] += busy[i];
    master_wait_seconds_ += waited;
    window_end_ = Clock::now();
  }
  if (!grad_enabled()) return out;

  std::vector<Tensor> graph_inputs{input};
  for (const Tensor& p : module_->parameters()) graph_inputs.push_back(p);
  Device input_device = input.device();
  return record(out, "DataParallelBackward", graph_inputs,
                [this, sizes, inputs, outputs, input_device, input_needs_grad](const Tensor& g) {
    return run_backward_on_replicas(g, sizes, inputs, outputs, input_device, input_needs_grad);
  });
}

// Backward of the whole parallel step: returns {d input, d master params...}.
std::vector<Tensor> DataParallel::run_backward_on_replicas(
    const Tensor& grad, const std::vector<int64_t>& sizes, const std::vector<Tensor>& inputs,
    const std::vector<Tensor>& outputs, Device input_device, bool input_needs_grad) {
  size_t n = outputs.size();
  int64_t d = normalize_dim("DataParallel", dim_, grad.dim());
  std::vector<Tensor> grad_chunks = split_sizes(grad, sizes, d);
  std::vector<Tensor> grads(n);
  for (size_t i = 0; i < n; ++i)
    grads[i] = traffic_.counted_copy(grad_chunks[i], devices_[i], DpPhase::GradScatter);

  auto wait_start = Clock::now();
  auto busy = run_parallel(*workers_, n, devices_, traffic_, [&](size_t i) {
    if (outputs[i].requires_grad()) run_backward(outputs[i], grads[i], /*retain_graph=*/false);
  });
  double waited = seconds_since(wait_start);

  // The server's reduction: every replica's gradient, summed on the master.
  std::vector<Tensor> result{Tensor()};
  std::vector<std::vector<Tensor>> replica_params;
  for (size_t i = 0; i < n; ++i) replica_params.push_back(replicas_[i]->parameters());
  auto master_params = module_->parameters();
  for (size_t k = 0; k < master_params.size(); ++k) {
    Tensor sum_grad;
    bool owned = false;  // sum_grad is a copy of our own (else it is a replica's gradient)
    for (size_t i = 0; i < n; ++i) {
      Tensor g = replica_params[i][k].grad();
      if (!g.defined()) continue;
      Tensor on_master = traffic_.counted_copy(g, devices_[0], DpPhase::Reduce);
      if (!sum_grad.defined()) {
        sum_grad = on_master.detach();  // one replica (N = 1): its gradient as it is
      } else {
        if (!owned) sum_grad = sum_grad.clone(), owned = true;  // never add into a replica's
        sum_grad.add_(on_master);
      }
      replica_params[i][k].set_grad({});  // the replica's copy is no longer needed
    }
    result.push_back(sum_grad);
  }
  if (input_needs_grad) {
    std::vector<Tensor> parts;
    for (size_t i = 0; i < n; ++i) {
      Tensor g = inputs[i].grad();
      if (!g.defined()) g = zeros(inputs[i].shape(), inputs[i].options());
      parts.push_back(traffic_.counted_copy(g, input_device, DpPhase::InputGrad));
    }
    result[0] = parts.size() == 1 ? parts[0] : cat(parts, d);
  }
  traffic_.wait_for_arrivals(devices_[0]);  // the summed gradients, before the master steps
  traffic_.wait_for_arrivals(input_device);
  std::lock_guard lock(stats_mutex_);
  for (size_t i = 0; i < n; ++i) replica_seconds_[i] += busy[i];
  master_wait_seconds_ += waited;
  window_end_ = Clock::now();
  return result;
}

std::vector<DeviceLoad> DataParallel::load() const {
  std::lock_guard lock(stats_mutex_);
  double window =
      window_open_ ? std::chrono::duration<double>(window_end_ - window_start_).count() : 0.0;
  std::vector<DeviceLoad> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    DeviceLoad l;
    l.device = devices_[i];
    l.peak_bytes = memory_stats(devices_[i]).peak_bytes;
    l.bytes_in = traffic_.bytes_in(static_cast<int>(i));
    l.bytes_out = traffic_.bytes_out(static_cast<int>(i));
    // The master's device works whenever the master thread is not waiting for replicas
    // (scatter, gather, reduce, loss, optimizer step), plus its own replica's compute.
    l.busy_seconds =
        i == 0 ? (window - master_wait_seconds_) + replica_seconds_[0] : replica_seconds_[i];
    l.busy_seconds = std::min(l.busy_seconds, window);
    l.idle_seconds = window - l.busy_seconds;
    out.push_back(l);
  }
  return out;
}

std::string DataParallel::report() const {
  auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  std::string s = fmt::format("{:<8} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "device", "peak MiB",
                              "in MiB", "out MiB", "busy s", "idle s");
  for (const DeviceLoad& l : load()) {
    s += fmt::format("{:<8} {:>12.2f} {:>12.2f} {:>12.2f} {:>10.3f} {:>10.3f}{}\n", l.device.str(),
                     mib(l.peak_bytes), mib(l.bytes_in), mib(l.bytes_out), l.busy_seconds,
                     l.idle_seconds, l.device == devices_[0] ? "  <- master" : "");
  }
  return s;
}

void DataParallel::reset_stats() {
  std::lock_guard lock(stats_mutex_);
  traffic_.reset();
  replica_seconds_.assign(devices_.size(), 0.0);
  master_wait_seconds_ = 0;
  window_open_ = false;
  for (Device d : devices_) reset_peak_memory_stats(d);
}

}  // namespace dplab::parallel
