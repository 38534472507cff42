// recording_engine.h: a process group that shows the tests what a reducer launched. Its
// engine forwards every collective to a real group over the thread transport, and for each
// all-reduce first keeps a copy of the bucket as it was launched (so a test can say which
// parameter's gradient landed at which offset) and notes whether backward had produced its
// last gradient by then. For the overlap test it can also hold the first all-reduce until
// backward's last gradient arrives: a reducer that waits for it inside a gradient hook
// (a blocking all-reduce) keeps backward from getting there. The test's own hooks, one
// before and one after the reducer's on every parameter, tell the hold what backward does:
// a reducer's hook entered and never returned, and no hook of backward runs any more, is a
// reducer waiting for the very all-reduce held (the verdict, from the order of events).
// Only how long "no more" lasts before the hold looks is a time: a generous guard (kStall),
// since a backward that moves on gives a hook event every few microseconds.
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

// How long the held all-reduce waits with no hook event at all before it looks whether a
// reducer's hook is stuck (a deadlock guard; backward's hooks come microseconds apart).
inline constexpr std::chrono::seconds kStall{15};

// What one rank's group saw. Shared between the test thread (the hooks) and the group's
// async thread (the all-reduces), hence the lock.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<float>> launched;  // each all-reduce's tensor as it arrived
  bool hold_first = false;        // hold the first all-reduce until the last gradient
  bool last_gradient = false;     // backward produced its last gradient (the test's hook)
  bool held_in_vain = false;      // the first all-reduce waited for that, and a reducer's hook stuck
  int hooks_running = 0;          // the reducer's gradient hooks entered and not returned
  int64_t hook_events = 0;        // the reducer's hooks entered and returned: backward moving on
  void gradient_done() {
    std::lock_guard<std::mutex> lock(mu);
    last_gradient = true;
    cv.notify_all();
  }
  void hook_entered() { count_hook(+1); }
  void hook_returned() { count_hook(-1); }

 private:
  void count_hook(int delta) {
    std::lock_guard<std::mutex> lock(mu);
    hooks_running += delta;
    ++hook_events;
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
      if (rec_->hold_first && rec_->launched.size() == 1) hold_until_last_gradient(lock);
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
  // Until backward's last gradient; or until backward has stopped (no hook event for
  // kStall) inside a reducer's hook: that hook waits for this all-reduce, which is let go
  // then, so that the test goes on to say so.
  void hold_until_last_gradient(std::unique_lock<std::mutex>& lock) {
    for (;;) {
      const int64_t seen = rec_->hook_events;
      if (!rec_->cv.wait_for(lock, kStall, [&] { return rec_->last_gradient || rec_->hook_events != seen; })) {
        rec_->held_in_vain = rec_->hooks_running > 0;
        return;
      }
      if (rec_->last_gradient) return;
    }
  }

  std::shared_ptr<ProcessGroup> inner_;
  std::shared_ptr<Recorder> rec_;
};

inline std::shared_ptr<ProcessGroup> recording_group(std::shared_ptr<ProcessGroup> inner,
                                                     std::shared_ptr<Recorder> rec) {
  return std::make_shared<ProcessGroup>(std::make_unique<RecordingEngine>(std::move(inner), std::move(rec)));
}

}  // namespace hw4::grading
