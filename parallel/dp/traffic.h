// traffic.h: what DataParallel's copies cost, per device pair and per phase.
// Every byte the parameter server moves goes through counted_copy(), so the report and
// the tests read the textbook volumes straight off these counters:
//   replicate  master -> each other device: P parameter bytes each, (N-1)·P per step
//   reduce     each other device -> master: P gradient bytes each, (N-1)·P per step
//   scatter / gather / grad_scatter / input_grad: the batch and its gradient, split N ways
// Read next: data_parallel.h.
#pragma once
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/transport/link_model.h"

namespace dplab::parallel {

enum class DpPhase {
  Scatter,
  Replicate,
  ReplicateBuffers,
  Gather,
  GradScatter,
  Reduce,
  InputGrad,
  kCount
};
inline constexpr int kDpPhases = static_cast<int>(DpPhase::kCount);
const char* dp_phase_name(DpPhase p);

class TrafficMatrix {
 public:
  explicit TrafficMatrix(std::vector<Device> devices);

  // Copies t to device `to` (a plain copy, no autograd) and counts its bytes, unless
  // `to` is t's own device, in which case t itself is returned and nothing is counted.
  Tensor counted_copy(const Tensor& t, Device to, DpPhase phase);
  // Counts a copy made elsewhere (Tensor::copy_ into an existing replica tensor). With an
  // emulated link, it also books the copy on both devices' links, like an asynchronous
  // device copy: nothing waits until wait_for_arrivals().
  void count(Device from, Device to, int64_t bytes, double seconds, DpPhase phase);
  // Puts every device behind a full-duplex link of `gbps` (0: none, copies at memory speed).
  void emulate_links(double gbps);
  // Sleeps until every copy booked into `d` would have crossed its link (a stream sync);
  // the time counts as d's copy time. Returns at once without emulated links.
  void wait_for_arrivals(Device d);

  int64_t bytes(DpPhase phase, int from_index, int to_index) const;
  int64_t bytes_out(int device_index) const;  // all phases
  int64_t bytes_in(int device_index) const;
  int64_t phase_bytes_out(DpPhase phase, int device_index) const;
  int64_t phase_bytes_in(DpPhase phase, int device_index) const;
  double copy_seconds(int device_index) const;  // time spent in its copies
  void reset();
  const std::vector<Device>& devices() const { return devices_; }
  int index_of(Device d) const;  // -1 when not one of ours

 private:
  std::vector<Device> devices_;
  // bytes_[phase][from * N + to]
  std::array<std::vector<int64_t>, kDpPhases> bytes_;
  std::vector<double> seconds_;
  std::unique_ptr<LinkModel> link_;
  std::vector<LinkClock::time_point> arrival_;  // per device: when its last booked copy lands
  mutable std::mutex mutex_;
};

}  // namespace dplab::parallel
