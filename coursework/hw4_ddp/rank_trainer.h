// rank_trainer.h: one rank's DDP training with the student's reducer, the same wherever the
// rank runs: on a thread of the tests (a student's own build, training.h) or as a process of
// its own that the grader starts (worker.cpp). The rank is given its model's weights and,
// each step, its rows of every micro-batch; every `micro`-th backward is synchronised, the
// others run inside no_sync (set_require_sync(false)). Its group records what the reducer
// launched (recording_engine.h), so that a wrong result can be explained: which parameter's
// gradient landed at which offset of which bucket, an all-reduce waited for inside a hook,
// or a backward that launched fewer buckets than the first (counts finish() did not reset).
// Read next: recording_engine.h, training.h.
#pragma once
#include <fmt/format.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "recording_engine.h"
#include "reducer.h"
#include "framework/autograd/engine.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"

namespace hw4::grading {

using namespace dplab;

// What a rank's training showed.
struct RankRun {
  std::vector<std::vector<float>> params;     // after the last step
  std::vector<std::vector<float>> grads;      // the last step's, as the reducer left them
  // counted outside the reducer: by the process group (threads), or from the bytes each rank
  // sent through the broker (the grader's ranks; -1: not a whole number of all-reduces per
  // bucket, and traffic_words says what was sent instead)
  std::vector<int64_t> all_reduces_per_step;
  std::vector<std::string> traffic_words;
  int64_t launched = 0;                         // as the reducer says
  int64_t launched_before_last_gradient = -1;   // in the last step, when param 0's gradient arrived
  bool held_in_vain = false;                    // the overlap test's hold (recording_engine.h)
  std::vector<std::vector<size_t>> buckets;     // the student's assign_buckets
  std::vector<std::vector<float>> local_grads;  // the first synchronised backward's, before the reduction
  std::vector<std::vector<float>> launched_flats;  // that backward's buckets, as they were launched
};

class RankTrainer {
 public:
  // say(words): at most once, at the end of a synchronised backward and before the reducer's
  // finish() (which may crash on what it says): the counts were not reset.
  RankTrainer(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<models::MLP> model, int64_t cap_bytes,
              bool hold_first, std::function<void(const std::string&)> say)
      : model_(std::move(model)), params_(model_->parameters()), rec_(std::make_shared<Recorder>()),
        say_(std::move(say)) {
    rec_->hold_first = hold_first;
    pg_ = recording_group(std::move(inner), rec_);
    run_.buckets = assign_buckets(params_, cap_bytes);
    // around the reducer's hook on every parameter, one before and one after: the hold of the
    // overlap test sees a reducer's hook that never returns (recording_engine.h)
    for (Tensor& p : params_)
      p.register_post_accumulate_grad_hook([this](Tensor&) {
        rec_->hook_entered();
        if (synced_ && !end_queued_) {
          end_queued_ = true;
          queue_backward_callback([this] { at_backward_end(); });
        }
      });
    // registered before the reducer's hooks, so it runs first: param 0's gradient is the last
    // of a backward (buckets go in reverse order), so whatever was launched by now overlapped
    params_[0].register_post_accumulate_grad_hook([this](Tensor&) {
      if (!synced_) return;
      if (reducer_) run_.launched_before_last_gradient = reducer_->all_reduces_launched() - launched_at_step_start_;
      if (run_.local_grads.empty())
        for (const Tensor& p : params_) run_.local_grads.push_back(p.grad().to_vector<float>());
      at_last_gradient(*rec_);
    });
    reducer_ = make_reducer(params_, pg_, cap_bytes);
    for (Tensor& p : params_) p.register_post_accumulate_grad_hook([rec = rec_](Tensor&) { rec->hook_returned(); });
    opt_ = std::make_unique<optim::SGD>(params_, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }

  // What the last gradient of a synchronised backward does, before the reducer's hook sees
  // it: let the held all-reduce go (recording_engine.h). The grader's ranks (worker.cpp) also
  // stop there until the judge has looked at what the broker has seen of the buckets.
  std::function<void(Recorder&)> at_last_gradient = [](Recorder& rec) { rec.gradient_done(); };

  // One training step: a backward per micro-batch (xs[m]: this rank's rows, ys[m]: their
  // labels), all but the last inside no_sync, then the optimizer's step.
  void step(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
    const int micro = static_cast<int>(xs.size());
    launched_at_step_start_ = reducer_->all_reduces_launched();
    course::harness::place().step = ++step_;
    course::harness::place().step_word = "training step";
    opt_->zero_grad();
    for (int m = 0; m < micro; ++m) {
      synced_ = m == micro - 1;
      reducer_->set_require_sync(synced_);
      cross_entropy(model_->forward(xs[m]), ys[m]).backward();
    }
    opt_->step();
  }

  // all-reduces the rank's group ran so far (the tests' threads count them this way)
  int64_t all_reduces_run() { return pg_->comm_stats().per_collective["all_reduce"].calls; }

  // What the training showed so far.
  RankRun result() {
    RankRun run = run_;
    run.launched = reducer_->all_reduces_launched();
    for (const Tensor& p : params_) {
      run.params.push_back(p.to_vector<float>());
      run.grads.push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>(p.numel(), 0.0f));
    }
    std::lock_guard<std::mutex> lock(rec_->mu);
    run.held_in_vain = rec_->held_in_vain;
    for (size_t b = 0; b < run.buckets.size() && b < rec_->launched.size(); ++b)
      run.launched_flats.push_back(rec_->launched[b]);
    return run;
  }

 private:
  // At the end of each synchronised backward, before the reducer's finish() (queued first, by
  // a hook that runs before the reducer's): every bucket is full by then, so all should be
  // launched. A reducer that launched them all in the first backward and not in a later one
  // kept counting from where the last backward left off; finish() then waits on buckets
  // never launched, which may crash there: this says why first.
  void at_backward_end() {
    end_queued_ = false;
    const int64_t buckets = static_cast<int64_t>(run_.buckets.size());
    const int64_t launched = reducer_->all_reduces_launched() - launched_at_step_start_;
    if (launched_in_first_ < 0) {
      launched_in_first_ = launched;
    } else if (launched < buckets && launched_in_first_ == buckets && !said_) {
      said_ = true;
      say_(fmt::format(
          "rank {}: training step {}'s backward ended with {} of its {} bucket{} launched, where training step 1's "
          "had launched {}: the counts your gradient hooks keep (each bucket's gradients still to come, the next "
          "bucket to launch) were not reset for the next backward. finish() should leave them as the constructor did",
          pg_->rank(), step_, launched, buckets, buckets == 1 ? "" : "s", buckets == 1 ? "it" : "all of them"));
    }
  }

  std::shared_ptr<models::MLP> model_;
  std::vector<Tensor> params_;
  std::shared_ptr<Recorder> rec_;
  std::function<void(const std::string&)> say_;
  std::shared_ptr<ProcessGroup> pg_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<optim::SGD> opt_;
  RankRun run_;
  bool synced_ = false;  // inside the step's synchronised backward
  bool end_queued_ = false;
  bool said_ = false;
  int64_t launched_at_step_start_ = 0, launched_in_first_ = -1;
  int step_ = 0;
};

}  // namespace hw4::grading
