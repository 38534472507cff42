// device_workers.cpp: the persistent workers of device_workers.h. A round: run() publishes
// the job and bumps round_; each worker thread i < active_ wakes and runs job(i) while the
// caller runs job(0); the last thread to finish wakes run(). Workers past active_ (a batch
// smaller than the device count) sit the round out.
// Read next: data_parallel.cpp.
#include "parallel/dp/device_workers.h"

#include <algorithm>
#include <cstdint>

#include "framework/autograd/grad_mode.h"

namespace dplab::parallel {

DeviceWorkers::DeviceWorkers(std::size_t n) : errors_(n) {
  threads_.reserve(n);
  for (std::size_t i = 1; i < n; ++i) threads_.emplace_back([this, i] { loop(i); });
}

DeviceWorkers::~DeviceWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::vector<std::exception_ptr> DeviceWorkers::run(std::size_t n,
                                                   const std::function<void(std::size_t)>& job) {
  const std::size_t active = std::min(n, errors_.size());
  if (active == 0) return {};
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    active_ = active;
    remaining_ = active - 1;  // the threads of devices 1..active-1
    grad_mode_ = grad_enabled();
    for (auto& e : errors_) e = nullptr;
    ++round_;
  }
  if (active > 1) start_cv_.notify_all();
  try {
    job(0);  // the master's device, on this thread
  } catch (...) {
    errors_[0] = std::current_exception();  // only this thread writes errors_[0]
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return remaining_ == 0; });
  job_ = nullptr;
  return std::vector<std::exception_ptr>(errors_.begin(), errors_.begin() + active);
}

void DeviceWorkers::loop(std::size_t i) {
  std::uint64_t done_round = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stopping_ || (round_ != done_round && i < active_); });
    if (stopping_) return;
    done_round = round_;
    const auto* job = job_;
    set_grad_enabled(grad_mode_);
    lock.unlock();
    std::exception_ptr error;
    try {
      (*job)(i);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    errors_[i] = error;
    if (--remaining_ == 0) done_cv_.notify_one();
  }
}

}  // namespace dplab::parallel
