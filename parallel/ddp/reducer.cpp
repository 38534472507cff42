// reducer.cpp: buckets, hooks, the graph walk for unused parameters, the rebuild after the
// first iteration and the end-of-backward wait (see reducer.h).
#include "parallel/ddp/reducer.h"

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/ops/ops.h"

namespace dplab::parallel {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params,
                                                int64_t cap_bytes) {
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t bytes = params[i].nbytes();
    // A bucket is one flat tensor, so it never mixes devices (model parallelism: ToyMpModel)
    // nor dtypes (Apex O2: 16-bit weights beside batch norm's float32 ones).
    bool new_device = i > 0 && (params[i].device() != params[i - 1].device() ||
                                params[i].dtype() != params[i - 1].dtype());
    if (buckets.empty() || new_device || (filled > 0 && filled + bytes > cap_bytes)) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes;
  }
  return buckets;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> pg, int64_t bucket_cap_bytes,
                 bool find_unused_parameters, bool gradient_as_bucket_view, CommHook hook)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)),
      cap_bytes_(bucket_cap_bytes), find_unused_(find_unused_parameters),
      grad_as_view_(gradient_as_bucket_view), hook_(std::move(hook)),
      solo_(pg_->size() == 1 && !grad_as_view_ && !find_unused_) {
  // First guess, reverse registration order: the order in which backward usually finishes.
  std::vector<size_t> order;
  for (size_t p = params_.size(); p-- > 0;) order.push_back(p);
  build_buckets(order);
  for (size_t p = 0; p < params_.size(); ++p) {
    // The sink is what the graph walk looks for; holding it keeps its identity stable.
    sinks_.push_back(gradient_edge(params_[p]));
    std::weak_ptr<Reducer*> self = self_;
    params_[p].register_post_accumulate_grad_hook([self, p](Tensor&) {
      if (auto r = self.lock(); r && *r) (*r)->mark_ready(p);
    });
  }
  ready_.assign(params_.size(), false);
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  std::vector<Tensor> ordered;
  for (size_t p : order) ordered.push_back(params_[p]);
  buckets_.clear();
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (const auto& group : assign_buckets(ordered, cap_bytes_)) {
    Bucket b;
    int64_t total = 0;
    for (size_t k : group) {
      size_t p = order[k];
      bucket_of_[p] = buckets_.size();
      slot_of_[p] = b.slots.size();
      b.slots.push_back({p, total, params_[p].numel()});
      total += params_[p].numel();
    }
    b.flat = zeros({total}, params_[b.slots[0].param].options());
    buckets_.push_back(std::move(b));
  }
  NoGradGuard no_grad;
  for (size_t p = 0; p < params_.size(); ++p) {
    Tensor view = slot_view(p);
    DPLAB_CHECK(params_[p].device() == view.device(),
                "DDP: each bucket must lie on one device; {} is on {}, "
                "its bucket on {}",
                names_[p], params_[p].device(), view.device());
    // A gradient that is already a view (of the old buckets) moves into the new ones.
    if (Tensor g = params_[p].grad(); grad_as_view_ && g.defined()) {
      view.copy_(g);
      params_[p].set_grad(view);
    }
  }
}

Tensor Reducer::slot_view(size_t p) {
  const BucketSlot& s = buckets_[bucket_of_[p]].slots[slot_of_[p]];
  return buckets_[bucket_of_[p]].flat.narrow(s.offset, s.numel).reshape(params_[p].shape());
}

void Reducer::rebuild_buckets() {
  rebuild_pending_ = false;
  rebuilt_ = true;
  // Parameters that never got a gradient (unused) go last, in reverse registration order.
  std::vector<bool> listed(params_.size(), false);
  std::vector<int64_t> order;
  for (size_t p : ready_order_) {
    if (!listed[p]) order.push_back(static_cast<int64_t>(p));
    listed[p] = true;
  }
  for (size_t p = params_.size(); p-- > 0;)
    if (!listed[p]) order.push_back(static_cast<int64_t>(p));
  // Every rank must lay out the same buckets: rank 0's order wins (another rank's backward
  // may have run in a different order, e.g. with unused parameters).
  Tensor t = from_vector(order, {static_cast<int64_t>(order.size())});
  pg_->broadcast(t, 0);
  std::vector<size_t> agreed;
  for (int64_t p : t.to_vector<int64_t>()) agreed.push_back(static_cast<size_t>(p));
  build_buckets(agreed);
  ready_order_ = {};
}

void Reducer::prepare_for_backward(const Tensor& output) {
  if (rebuild_pending_) rebuild_buckets();
  // A forward whose backward never ran (evaluation without no_grad) leaves nothing pending.
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.slots.size());
    b.work.reset();
  }
  ready_.assign(params_.size(), false);
  unused_.clear();
  next_bucket_ = 0;
  backward_active_ = false;
  if (!find_unused_ || !require_sync_) return;
  // PyTorch's way: whatever the walk from the output does not reach gets no gradient in this
  // backward; mark it ready now, so its bucket goes out as soon as its other slots are full.
  auto reached = reachable_nodes(output);
  for (size_t p = 0; p < params_.size(); ++p)
    if (!reached.count(sinks_[p].get())) mark_unused(p);
}

void Reducer::mark_unused(size_t p) {
  ready_[p] = true;
  unused_.push_back(p);
  // An unused parameter contributes what its .grad holds (e.g. accumulated under no_sync),
  // zeros when it has none, so every rank can still reduce the bucket.
  NoGradGuard no_grad;
  Tensor view = slot_view(p), g = params_[p].grad();
  if (!g.defined()) view.zero_();
  else if (g.raw_data() != view.raw_data()) view.copy_(g);
  --buckets_[bucket_of_[p]].pending;
}

void Reducer::mark_ready(size_t p) {
  if (!require_sync_) return;  // inside no_sync(): gradients just accumulate in .grad
  // One rank: its gradients are already the average over all ranks; copying them into a
  // bucket, handing the bucket to a communication hook and copying it back would cost
  // time (measured: docs/measurements/main_job.md) and change nothing.
  if (solo_) return;
  if (!backward_active_) {
    backward_active_ = true;
    queue_backward_callback([this] { finalize(); });
  }
  DPLAB_CHECK(
      !ready_[p],
      "DDP: parameter {} got its gradient twice in one backward (is it used by two "
      "forward calls before one backward? call backward once per forward; or was the graph walk "
      "from the forward's output unable to see it?)",
      names_[p]);
  ready_[p] = true;
  if (!rebuilt_) ready_order_.push_back(p);
  Tensor view = slot_view(p);
  Tensor g = params_[p].grad();
  if (!(grad_as_view_ && g.raw_data() == view.raw_data())) {  // a view already holds it in place
    NoGradGuard no_grad;
    view.copy_(g);
    if (grad_as_view_) params_[p].set_grad(view);  // from now on backward adds into the bucket
  }
  --buckets_[bucket_of_[p]].pending;
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
  std::vector<std::string> missing;
  for (size_t p = 0; p < params_.size(); ++p) {
    if (ready_[p]) continue;
    // Reached by the walk but given no gradient (a branch whose backward returned none).
    if (find_unused_) mark_unused(p);
    else missing.push_back(names_[p]);
  }
  DPLAB_CHECK(
      missing.empty(),
      "DDP: these parameters received no gradient in this backward: {}. Every "
      "rank must reduce every bucket, so this would hang the others; construct "
      "DistributedDataParallel with {{.find_unused_parameters = true}} if parts of the model are "
      "not used in some steps",
      fmt::join(missing, ", "));
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
  if (!rebuilt_) rebuild_pending_ = true;  // the next forward lays buckets out in ready order
}

}  // namespace dplab::parallel
