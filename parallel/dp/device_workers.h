// device_workers.h: one persistent thread per device, for DataParallel's replicas.
// DataParallel runs every replica's forward, then every replica's backward, each on the
// thread of its device. Starting and joining N threads twice per step costs more than a
// small model's step on one device (and each new thread starts a fresh OpenMP team);
// PyTorch's parallel_apply starts threads on every call too. Here the threads are made once
// and live as long as the DataParallel: a step hands each a job and waits for all of them.
// Device 0, the master, is worked by the calling thread itself (the master's thread): at
// N = 1 there is no hand-off at all, and at any N one fewer wake-up to wait for, which on
// a loaded machine (more runnable threads than cores) costs a scheduler time slice.
// Read next: data_parallel.cpp (its two calls of run()).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dplab::parallel {

class DeviceWorkers {
 public:
  explicit DeviceWorkers(std::size_t n);  // n - 1 threads (devices 1..n-1), idle until run()
  ~DeviceWorkers();                       // stops and joins them
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  // Runs job(i) on worker i for every i < n (n <= the device count), all at once (job(0) on
  // the calling thread), and returns when every one has finished: what each threw, or null.
  // Each worker first takes the caller's grad mode (it is thread-local). One run() at a time.
  std::vector<std::exception_ptr> run(std::size_t n, const std::function<void(std::size_t)>& job);

 private:
  void loop(std::size_t i);

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t active_ = 0;     // devices 0..active_-1 take part in this round
  std::size_t remaining_ = 0;  // of the threads among them, still running
  std::uint64_t round_ = 0;    // bumped by run(): a worker waits for a round it has not done
  bool grad_mode_ = true;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;  // threads_[i - 1] works device i
};

}  // namespace dplab::parallel
