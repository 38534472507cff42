// reducer.cpp: buckets, hooks and the end-of-backward wait (see reducer.h).
#include "parallel/ddp/reducer.h"

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace dplab::parallel {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params, int64_t cap_bytes) {
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t bytes = params[i].nbytes();
    // A bucket is one flat tensor, so it never mixes devices (model parallelism: ToyMpModel).
    bool new_device = i > 0 && params[i].device() != params[i - 1].device();
    if (buckets.empty() || new_device || (filled > 0 && filled + bytes > cap_bytes)) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes;
  }
  return buckets;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> pg,
                 int64_t bucket_cap_bytes, bool find_unused_parameters, bool gradient_as_bucket_view, CommHook hook)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)),
      find_unused_(find_unused_parameters), grad_as_view_(gradient_as_bucket_view), hook_(std::move(hook)) {
  // Reverse registration order: the order in which backward finishes gradients.
  std::vector<Tensor> reversed(params_.rbegin(), params_.rend());
  auto groups = assign_buckets(reversed, bucket_cap_bytes);
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (const auto& group : groups) {
    Bucket b;
    int64_t total = 0;
    for (size_t r : group) {
      size_t p = params_.size() - 1 - r;
      bucket_of_[p] = buckets_.size();
      slot_of_[p] = b.slots.size();
      b.slots.push_back({p, total, params_[p].numel()});
      total += params_[p].numel();
    }
    b.flat = zeros({total}, params_[b.slots[0].param].options());
    buckets_.push_back(std::move(b));
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    DPLAB_CHECK(params_[p].device() == buckets_[bucket_of_[p]].flat.device(),
                "DDP: each bucket must lie on one device; {} is on {}, its bucket on {}", names_[p],
                params_[p].device(), buckets_[bucket_of_[p]].flat.device());
    std::weak_ptr<Reducer*> self = self_;
    params_[p].register_post_accumulate_grad_hook([self, p](Tensor&) {
      if (auto r = self.lock(); r && *r) (*r)->mark_ready(p);
    });
  }
  ready_.assign(params_.size(), false);
}

void Reducer::prepare_for_backward() {
  // A forward whose backward never ran (evaluation without no_grad) leaves nothing pending.
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.slots.size());
    b.work.reset();
  }
  ready_.assign(params_.size(), false);
  next_bucket_ = 0;
  backward_active_ = false;
}

void Reducer::mark_ready(size_t p) {
  if (!require_sync_) return;  // inside no_sync(): gradients just accumulate in .grad
  if (!backward_active_) {
    backward_active_ = true;
    queue_backward_callback([this] { finalize(); });
  }
  DPLAB_CHECK(!ready_[p], "DDP: parameter {} got its gradient twice in one backward (is it used by two "
              "forward calls before one backward? call backward once per forward)", names_[p]);
  ready_[p] = true;
  Bucket& b = buckets_[bucket_of_[p]];
  const BucketSlot& s = b.slots[slot_of_[p]];
  Tensor view = b.flat.narrow(s.offset, s.numel).reshape(params_[p].shape());
  Tensor g = params_[p].grad();
  if (!(grad_as_view_ && g.raw_data() == view.raw_data())) {  // a view already holds it in place
    NoGradGuard no_grad;
    view.copy_(g);
    if (grad_as_view_) params_[p].set_grad(view);  // from now on backward adds into the bucket
  }
  --b.pending;
  launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    b.work = hook_(*pg_, b.flat);
    ++reductions_launched_;
  }
}

void Reducer::finalize() {
  backward_active_ = false;
  std::vector<std::string> unused;
  for (size_t p = 0; p < params_.size(); ++p) {
    if (ready_[p]) continue;
    if (!find_unused_) {
      unused.push_back(names_[p]);
      continue;
    }
    // An unused parameter contributes zeros, so the bucket can still be reduced.
    Bucket& b = buckets_[bucket_of_[p]];
    const BucketSlot& s = b.slots[slot_of_[p]];
    b.flat.narrow(s.offset, s.numel).zero_();
    ready_[p] = true;
    --b.pending;
  }
  DPLAB_CHECK(unused.empty(), "DDP: these parameters received no gradient in this backward: {}. Every "
              "rank must reduce every bucket, so this would hang the others; construct "
              "DistributedDataParallel with {{.find_unused_parameters = true}} if parts of the model are "
              "not used in some steps", fmt::join(unused, ", "));
  launch_ready_buckets();
  NoGradGuard no_grad;
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    for (const BucketSlot& s : b.slots) {
      Tensor view = b.flat.narrow(s.offset, s.numel).reshape(params_[s.param].shape());
      Tensor g = params_[s.param].grad();
      if (grad_as_view_) {
        params_[s.param].set_grad(view);
      } else if (g.defined()) {
        g.copy_(view);
      } else {
        params_[s.param].set_grad(view.clone());  // an unused parameter gets its (averaged) zeros
      }
    }
  }
  for (auto& b : buckets_) b.pending = static_cast<int>(b.slots.size());
  ready_.assign(params_.size(), false);
  next_bucket_ = 0;
}

}  // namespace dplab::parallel
