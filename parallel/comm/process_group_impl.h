// process_group_impl.h: the inside of a ProcessGroup (internal header): the async worker
// queue that keeps every rank's calls in one order, the run() loop that times a collective,
// counts its traffic and marks the rank failed when it throws, the engine form of it,
// and where a tensor's bytes go (the transport for its device).
// Used by process_group.cpp (the collectives) and create_process_group.cpp.
// Read next: process_group.cpp.
#pragma once
#include "parallel/comm/process_group.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "framework/backend/backend.h"
#include "framework/error.h"
#include "parallel/backends/collective_engine.h"
#include "parallel/comm/collectives.h"

namespace dplab::parallel {

// The tensor a collective works on. CPU tensors, and CUDA tensors when the group moves them
// with cuda_ipc, are used in place; a CUDA tensor without cuda_ipc goes through a host copy
// (the fallback, named "host" for it). Every tensor is contiguous (tensor.h), so in place
// means its raw bytes.
inline Tensor to_host(const Tensor& t, bool cuda_in_place) {
  if (t.device().is_cpu() || cuda_in_place) return t;
  return t.contiguous_copy_on(Device(DeviceKind::CPU));
}

struct WorkState : Work {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  void wait() override {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = e;
    }
    cv.notify_all();
  }
};

struct ProcessGroup::Impl {
  std::unique_ptr<Transport> transport;       // CPU tensors (and staged CUDA tensors)
  CudaTransportFactory make_cuda;             // set by create_process_group with CUDA
  std::unique_ptr<Transport> cuda_transport;  // made by make_cuda at the first CUDA call
  int cuda_index = -1;                        // its logical device
  bool cuda_in_place = false;                 // a factory was given: CUDA tensors stay put
  std::unique_ptr<CollectiveEngine> engine;  // mpi / nccl: then there is no transport
  std::string broken;  // set by a failed collective: the links' state is unknown after it
  mutable std::mutex stats_mu;
  CommStats stats;

  // async queue: one worker, call order preserved
  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<WorkState>>> queue;
  bool busy = false, stopping = false;
  std::thread worker;

  void worker_loop() {
    std::unique_lock<std::mutex> lock(q_mu);
    for (;;) {
      q_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping and drained
      auto [fn, work] = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      std::exception_ptr err;
      try {
        fn();
      } catch (...) {
        err = std::current_exception();
      }
      work->finish(err);
      lock.lock();
      busy = false;
      q_cv.notify_all();
    }
  }

  WorkPtr enqueue(std::function<void()> fn) {
    auto work = std::make_shared<WorkState>();
    std::lock_guard<std::mutex> lock(q_mu);
    if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
    queue.emplace_back(std::move(fn), work);
    q_cv.notify_all();
    return work;
  }

  Tensor to_host(const Tensor& t) const { return parallel::to_host(t, cuda_in_place); }

  // The transport for buffers on d; the cuda_ipc one is made here at the first CUDA call.
  Transport& transport_for(Device d) {
    if (d.is_cpu()) return *transport;
    if (!cuda_transport) {
      DPLAB_CHECK(make_cuda != nullptr, "process group: a {} buffer reached the collectives, but "
                  "this group has no cuda_ipc transport (it should have been staged)", d);
      cuda_transport = make_cuda(d.index);
      cuda_index = d.index;
      make_cuda = nullptr;  // made once; this lets go of the store the factory held
    }
    DPLAB_CHECK(d.index == cuda_index, "process group: this rank's cuda_ipc transport is on "
                "cuda:{} (its first CUDA collective), got a tensor on {}; use one device per "
                "rank, or a second process group", cuda_index, d);
    return *cuda_transport;
  }
  template <typename Each>
  void for_each_transport(Each each) {
    each(*transport);
    if (cuda_transport) each(*cuda_transport);
  }

  // A blocking call first lets queued async calls finish, so every rank sees one order.
  void drain() {
    std::unique_lock<std::mutex> lock(q_mu);
    if (worker.joinable() && std::this_thread::get_id() == worker.get_id()) return;
    q_cv.wait(lock, [&] { return queue.empty() && !busy; });
  }

  // device: where the buffers are (where(host)); it picks the transport and the backend.
  template <typename Fn>
  void run(const std::string& name, const std::string& context, DType dtype,
           dplab::ReduceOp op, Fn fn, Device device = Device(DeviceKind::CPU)) {
    drain();
    if (!broken.empty())
      throw CommError(fmt::format("rank {}: {} refused: this process group failed earlier ({}); "
                                  "make a new one", transport->rank(), context, broken));
    Traffic traffic;
    auto start = std::chrono::steady_clock::now();
    try {
      Transport& tr = transport_for(device);
      tr.set_context(context);
      Ctx ctx{tr, dtype, op, traffic, device};
      fn(ctx);
      tr.end_collective();
    } catch (const std::exception& e) {
      broken = e.what();
      for_each_transport([](Transport& t) {
        try {
          t.end_collective();
        } catch (const std::exception&) {  // the first error is the one to report
        }
      });
      const std::string why = fmt::format("{} on rank {}: {}", context, transport->rank(),
                                          e.what());
      for_each_transport([&](Transport& t) { t.mark_failed(why); });
      throw;
    }
    record(name, traffic.sent, traffic.received, start);
  }

  // The engine's form of run(): the engine moves the bytes, the counters get model bytes.
  template <typename Fn>
  void on_engine(const std::string& name, const std::string& context, ModelTraffic traffic,
                 Fn fn) {
    drain();
    if (!broken.empty())
      throw CommError(fmt::format("rank {}: {} refused: this process group failed earlier ({}); "
                                  "make a new one", engine->rank(), context, broken));
    auto start = std::chrono::steady_clock::now();
    try {
      fn();
    } catch (const std::exception& e) {
      broken = fmt::format("{} on the {} backend: {}", context, engine->name(), e.what());
      throw;
    }
    record(name, traffic.sent, traffic.received, start);
  }

  void record(const std::string& name, int64_t sent, int64_t received,
              std::chrono::steady_clock::time_point start) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(stats_mu);
    for (CollectiveStats* s : {&stats.per_collective[name], &stats.total}) {
      s->calls += 1;
      s->bytes_sent += sent;
      s->bytes_received += received;
      s->seconds += secs;
    }
  }
};

}  // namespace dplab::parallel
