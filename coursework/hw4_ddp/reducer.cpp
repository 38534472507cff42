// reducer.cpp: hw4, DDP's gradient reducer. Your code replaces each // TODO the starter
// left. Words: a *bucket* is one flat float32 tensor holding the gradients of a few
// parameters side by side, each in its *slot*; it is all-reduced as one message, which
// costs one latency instead of one per parameter. See README.md for the schedule.
#include <algorithm>
#include <stdexcept>

#include "reducer.h"
#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace hw4 {

using namespace dplab;
using dplab::parallel::ReduceOp;
using dplab::parallel::WorkPtr;

std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params, int64_t cap_bytes) {
  // BEGIN ASSIGNMENT: buckets in reverse parameter order, cut at cap_bytes (README section 2)
  std::vector<std::vector<size_t>> buckets;
  int64_t bytes = 0;
  for (size_t i = params.size(); i-- > 0;) {
    const int64_t b = params[i].numel() * 4;
    if (buckets.empty() || (bytes + b > cap_bytes && !buckets.back().empty())) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(i);
    bytes += b;
  }
  return buckets;
  // END ASSIGNMENT
}

namespace {

struct Slot {
  size_t param;
  int64_t offset, numel;  // in elements, into the bucket
};

struct Bucket {
  Tensor flat;  // every slot's gradient, side by side
  std::vector<Slot> slots;
  int pending = 0;  // slots whose gradient has not arrived in this backward
  WorkPtr work;     // the all-reduce in flight
};

class GradientReducer final : public Reducer {
 public:
  GradientReducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, int64_t cap_bytes)
      : params_(std::move(params)), pg_(std::move(pg)) {
    bucket_of_.resize(params_.size());
    for (const std::vector<size_t>& members : assign_buckets(params_, cap_bytes)) {
      Bucket b;
      int64_t offset = 0;
      for (size_t p : members) {
        b.slots.push_back({p, offset, params_[p].numel()});
        bucket_of_[p] = buckets_.size();
        offset += params_[p].numel();
      }
      b.flat = zeros({offset});
      b.pending = static_cast<int>(b.slots.size());
      buckets_.push_back(std::move(b));
    }
    for (size_t p = 0; p < params_.size(); ++p)
      params_[p].register_post_accumulate_grad_hook([this, p](Tensor&) { on_gradient_ready(p); });
  }

  void set_require_sync(bool on) override { require_sync_ = on; }
  int64_t all_reduces_launched() const override { return launched_; }

 private:
  // Called by autograd when parameter p's gradient for this backward is final.
  void on_gradient_ready(size_t p) {
    // BEGIN ASSIGNMENT: copy into the slot, launch full buckets in order, finish at the end (README section 3)
    if (!require_sync_) return;  // no_sync: the gradient just stays in .grad
    if (!finish_queued_) {       // the first gradient of this backward
      queue_backward_callback([this] { finish(); });
      finish_queued_ = true;
    }
    Bucket& b = buckets_[bucket_of_[p]];
    for (const Slot& s : b.slots)
      if (s.param == p) {
        NoGradGuard no_grad;
        b.flat.narrow(s.offset, s.numel).copy_(reshape(params_[p].grad(), {s.numel}));
      }
    --b.pending;
    // every rank must start the same all-reduces in the same order: bucket 0, 1, 2, ...
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
      buckets_[next_].work = pg_->all_reduce_async(buckets_[next_].flat, ReduceOp::Avg);
      ++next_;
      ++launched_;
    }
    // END ASSIGNMENT
  }

  // After the backward pass: wait for every bucket, write the averages back into .grad.
  void finish() {
    // BEGIN ASSIGNMENT: wait for each bucket and write the averaged gradients back (README section 3)
    NoGradGuard no_grad;
    for (Bucket& b : buckets_) {
      if (!b.work) throw std::logic_error("a bucket was never launched: did every gradient arrive?");
      b.work->wait();
      b.work.reset();
      for (const Slot& s : b.slots)
        params_[s.param].grad().copy_(reshape(b.flat.narrow(s.offset, s.numel), params_[s.param].shape()));
      b.pending = static_cast<int>(b.slots.size());
    }
    next_ = 0;
    finish_queued_ = false;
    // END ASSIGNMENT
  }

  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  size_t next_ = 0;  // the next bucket to launch
  bool require_sync_ = true;
  bool finish_queued_ = false;
  int64_t launched_ = 0;
};

}  // namespace

std::unique_ptr<Reducer> make_reducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg,
                                      int64_t cap_bytes) {
  return std::make_unique<GradientReducer>(std::move(params), std::move(pg), cap_bytes);
}

}  // namespace hw4
