// data_parallel.h: torch.nn.DataParallel, the parameter-server mode, one process.
//
// One step, N devices, the master is device_ids[0]:
//   forward   broadcast the master's weights to the N-1 replicas  (master sends (N-1)·P)
//             scatter the batch along `dim` as Tensor.chunk does
//             run the replicas at once, each on its device's worker thread
//             gather the outputs onto output_device
//   backward  scatter the output gradient, run each replica's backward in its thread,
//             sum the replicas' parameter gradients onto the master (master receives (N-1)·P)
//   step      the optimizer updates the master's parameters only; the next forward
//             broadcasts them again.
// Everything flows through the master: it holds the gathered outputs, the loss, the
// reduced gradients and the optimizer state, and moves (N-1)x the bytes of any other device.
// That load imbalance is what report() shows (see tutorials/07_data_parallel.md).
//
// Replicas are built once (the module's make_empty_copy) and refreshed by copy each step;
// so are the worker threads, one per device, which live as long as the DataParallel
// (device_workers.h).
// Replica 0 shares the master's storage, so BatchNorm running stats are those of the
// master's chunk only: the other replicas' updates are discarded, as in PyTorch.
// Read next: traffic.h, device_workers.h, then parallel/ddp/ for the ring way.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/nn/module.h"
#include "parallel/dp/traffic.h"

namespace dplab::parallel {

class DeviceWorkers;

struct DataParallelOptions {
  std::vector<Device> device_ids;
  std::optional<Device> output_device;  // default: device_ids[0]
  int64_t dim = 0;
};

struct DeviceLoad {
  Device device;
  int64_t peak_bytes = 0, bytes_in = 0, bytes_out = 0;
  double busy_seconds = 0, idle_seconds = 0;
};

class DataParallel : public nn::Module {
 public:
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids,
               std::optional<Device> output_device = std::nullopt, int64_t dim = 0);
  ~DataParallel() override;

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  nn::Module& module() { return *module_; }
  std::shared_ptr<nn::Module> module_ptr() { return module_; }
  const std::vector<Device>& device_ids() const { return devices_; }
  const TrafficMatrix& traffic() const { return traffic_; }
  // Every copy between two devices also waits as if it crossed a link of `gbps` Gbit/s
  // per device (transport/link_model.h); 0 turns it off. Teaching aid, off by default.
  void emulate_links(double gbps) { traffic_.emulate_links(gbps); }

  // Per device: peak memory, bytes in/out, busy and idle time since reset_stats().
  std::vector<DeviceLoad> load() const;
  std::string report() const;  // the table
  void reset_stats();          // counters, timers and every device's peak memory

 private:
  void broadcast_weights();
  std::vector<Tensor> run_backward_on_replicas(const Tensor& grad,
                                               const std::vector<int64_t>& sizes,
                                               const std::vector<Tensor>& inputs,
                                               const std::vector<Tensor>& outputs,
                                               Device input_device, bool input_needs_grad);

  std::shared_ptr<nn::Module> module_;
  std::vector<Device> devices_;
  Device output_device_;
  int64_t dim_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;  // replicas_[0] aliases the master
  std::unique_ptr<DeviceWorkers> workers_;             // one thread per device

  TrafficMatrix traffic_;
  std::vector<double> replica_seconds_;  // compute time of each replica's thread
  double master_wait_seconds_ = 0;       // master thread blocked on the replicas
  std::chrono::steady_clock::time_point window_start_, window_end_;
  bool window_open_ = false;
  mutable std::mutex stats_mutex_;
};

}  // namespace dplab::parallel
