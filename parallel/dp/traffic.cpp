// traffic.cpp: counted copies for DataParallel.
#include "parallel/dp/traffic.h"

#include <algorithm>
#include <chrono>

#include "framework/error.h"

namespace dplab::parallel {

const char* dp_phase_name(DpPhase p) {
  switch (p) {
    case DpPhase::Scatter: return "scatter";
    case DpPhase::Replicate: return "replicate";
    case DpPhase::ReplicateBuffers: return "replicate_buffers";
    case DpPhase::Gather: return "gather";
    case DpPhase::GradScatter: return "grad_scatter";
    case DpPhase::Reduce: return "reduce";
    case DpPhase::InputGrad: return "input_grad";
    case DpPhase::kCount: break;
  }
  return "?";
}

TrafficMatrix::TrafficMatrix(std::vector<Device> devices) : devices_(std::move(devices)) {
  reset();
}

int TrafficMatrix::index_of(Device d) const {
  for (size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i] == d) return static_cast<int>(i);
  return -1;
}

void TrafficMatrix::emulate_links(double gbps) {
  DPLAB_CHECK(gbps >= 0, "DataParallel: link bandwidth must be >= 0 Gbit/s (0: none), got {}",
              gbps);
  std::lock_guard lock(mutex_);
  link_ = gbps > 0 ? std::make_unique<LinkModel>(static_cast<int>(devices_.size()), gbps) : nullptr;
  arrival_.assign(devices_.size(), LinkClock::time_point{});
}

void TrafficMatrix::wait_for_arrivals(Device d) {
  int i = index_of(d);
  LinkClock::time_point until;
  {
    std::lock_guard lock(mutex_);
    if (!link_ || i < 0) return;
    until = arrival_[i];
  }
  auto start = LinkClock::now();
  if (until <= start) return;
  sleep_on_link(until);
  std::lock_guard lock(mutex_);
  seconds_[i] += std::chrono::duration<double>(LinkClock::now() - start).count();
}

void TrafficMatrix::reset() {
  std::lock_guard lock(mutex_);
  size_t n = devices_.size();
  for (auto& b : bytes_) b.assign(n * n, 0);
  seconds_.assign(n, 0.0);
}

void TrafficMatrix::count(Device from, Device to, int64_t nbytes, double seconds, DpPhase phase) {
  int f = index_of(from), t = index_of(to);
  if (f < 0 || t < 0 || f == t) return;  // copies to or from elsewhere are the user's
  std::lock_guard lock(mutex_);
  if (link_) arrival_[t] = std::max(arrival_[t], link_->book(f, t, nbytes));
  bytes_[static_cast<int>(phase)][f * devices_.size() + t] += nbytes;
  seconds_[f] += seconds;
  seconds_[t] += seconds;
}

Tensor TrafficMatrix::counted_copy(const Tensor& t, Device to, DpPhase phase) {
  if (t.device() == to) return t;
  auto start = std::chrono::steady_clock::now();
  Tensor out = t.detach().contiguous_copy_on(to);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  count(t.device(), to, t.nbytes(), s, phase);
  return out;
}

int64_t TrafficMatrix::bytes(DpPhase phase, int from, int to) const {
  std::lock_guard lock(mutex_);
  return bytes_[static_cast<int>(phase)][from * devices_.size() + to];
}

int64_t TrafficMatrix::phase_bytes_out(DpPhase phase, int d) const {
  int64_t sum = 0;
  for (size_t t = 0; t < devices_.size(); ++t) sum += bytes(phase, d, static_cast<int>(t));
  return sum;
}

int64_t TrafficMatrix::phase_bytes_in(DpPhase phase, int d) const {
  int64_t sum = 0;
  for (size_t f = 0; f < devices_.size(); ++f) sum += bytes(phase, static_cast<int>(f), d);
  return sum;
}

int64_t TrafficMatrix::bytes_out(int d) const {
  int64_t sum = 0;
  for (int p = 0; p < kDpPhases; ++p) sum += phase_bytes_out(static_cast<DpPhase>(p), d);
  return sum;
}

int64_t TrafficMatrix::bytes_in(int d) const {
  int64_t sum = 0;
  for (int p = 0; p < kDpPhases; ++p) sum += phase_bytes_in(static_cast<DpPhase>(p), d);
  return sum;
}

double TrafficMatrix::copy_seconds(int d) const {
  std::lock_guard lock(mutex_);
  return seconds_[d];
}

}  // namespace dplab::parallel
