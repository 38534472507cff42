// recording_engine.h: a process group that shows the tests what a reducer launched. Its
// engine forwards every collective to a real group over the thread transport, and for each
// all-reduce first keeps a copy of the bucket as it was launched (so a test can say which
// parameter's gradient landed at which offset) and notes whether backward had produced its
// last gradient by then. For the overlap test it can also hold the first all-reduce until
// backward's last gradient arrives: a reducer that waits for it inside a gradient hook
// (a blocking all-reduce) keeps backward from getting there, the hold runs out instead,
// and the test knows, from the order of events and not from timing.
// Read next: training.h.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "framework/ops/ops.h"
#include "parallel/comm/process_group.h"
#include "parallel/engines/collective_engine.h"

namespace hw4::grading {

using dplab::Tensor;
using namespace dplab::parallel;

// What one rank's group saw. Shared between the test thread (the hooks) and the group's
// async thread (the all-reduces), hence the lock.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<float>> launched;  // each all-reduce's tensor as it arrived
  bool hold_first = false;        // hold the first all-reduce until the last gradient
  bool last_gradient = false;     // backward produced its last gradient (the test's hook)
  bool held_in_vain = false;      // the first all-reduce waited for that, and it never came
  void gradient_done() {
    std::lock_guard<std::mutex> lock(mu);
    last_gradient = true;
    cv.notify_all();
  }
};

class RecordingEngine final : public CollectiveEngine {
 public:
  RecordingEngine(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<Recorder> rec)
      : inner_(std::move(inner)), rec_(std::move(rec)) {}
  const std::string& name() const override { return inner_->engine(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  // The inner group counts the bytes it moves; this one reports none of its own.
  void all_reduce(CollectiveCall&, Tensor& t, ReduceOp op, std::optional<Algorithm> algo) override {
    {
      std::unique_lock<std::mutex> lock(rec_->mu);
      rec_->launched.push_back(t.to_vector<float>());
      if (rec_->hold_first && rec_->launched.size() == 1 &&
          !rec_->cv.wait_for(lock, std::chrono::seconds(1), [&] { return rec_->last_gradient; }))
        rec_->held_in_vain = true;
    }
    inner_->all_reduce(t, op, algo);
  }
  void broadcast(CollectiveCall&, Tensor& t, int root) override { inner_->broadcast(t, root); }
  void reduce(CollectiveCall&, Tensor& t, int root, ReduceOp op) override { inner_->reduce(t, root, op); }
  void all_gather(CollectiveCall&, std::vector<Tensor>& out, const Tensor& in) override {
    inner_->all_gather(out, in);
  }
  void reduce_scatter(CollectiveCall&, Tensor& out, const std::vector<Tensor>& in, ReduceOp op) override {
    inner_->reduce_scatter(out, in, op);
  }
  void gather(CollectiveCall&, std::vector<Tensor>& out, const Tensor& in, int root) override {
    inner_->gather(out, in, root);
  }
  void scatter(CollectiveCall&, Tensor& out, const std::vector<Tensor>& in, int root) override {
    inner_->scatter(out, in, root);
  }
  void barrier(CollectiveCall&) override { inner_->barrier(); }
  void send(CollectiveCall&, const Tensor& t, int dst) override { inner_->send(t, dst); }
  void recv(CollectiveCall&, Tensor& t, int src) override { inner_->recv(t, src); }
  void abort(const std::string&) override {}

 private:
  std::shared_ptr<ProcessGroup> inner_;
  std::shared_ptr<Recorder> rec_;
};

inline std::shared_ptr<ProcessGroup> recording_group(std::shared_ptr<ProcessGroup> inner,
                                                     std::shared_ptr<Recorder> rec) {
  return std::make_shared<ProcessGroup>(std::make_unique<RecordingEngine>(std::move(inner), std::move(rec)));
}

}  // namespace hw4::grading
