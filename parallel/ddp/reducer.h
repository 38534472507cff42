// reducer.h: DDP's gradient buckets, the part that makes communication overlap compute.
//
// Parameters are grouped into buckets, each one flat tensor of at most bucket_cap_mb. The
// first layout is REVERSE registration order (a guess at the order backward produces
// gradients: last layer first). As backward runs, each parameter's "gradient is final" hook
// copies its gradient into its bucket slot; when a bucket's last slot is filled the bucket
// is all-reduced asynchronously while backward goes on computing earlier layers. Buckets are
// launched strictly in index order on every rank (a collective must be called in the same
// order everywhere, or the ring pairs bucket 1 on one rank with bucket 2 on another). At the
// end of backward the reducer waits for every bucket and writes the averaged gradients back.
//
// As PyTorch does, the reducer also
//   - records the order in which gradients became ready in the first synchronised backward
//     and, at the next forward, rebuilds the buckets in that order (rank 0's order, sent to
//     all: a broadcast, so every rank must make that forward, as with broadcast_buffers),
//     so a model whose registration order differs from its backward order still overlaps;
//   - with find_unused_parameters, walks the autograd graph from the forward's output and
//     marks every parameter the walk does not reach ready at once (its slot holds its
//     current .grad, zeros when there is none), so its bucket does not wait for the end;
//   - with gradient_as_bucket_view, makes .grad a view of the bucket and keeps it one:
//     zero_grad(/*set_to_none=*/false) zeroes it in place and backward adds into it, so no
//     gradient is ever allocated or copied.
// Cost per step: one all-reduce per bucket; a ring moves 2(N-1)/N of the bucket's bytes.
// On one rank (world size 1) the reducer stands aside: .grad already holds the average, so
// no gradient is copied into a bucket, no hook is called and nothing waits (unless
// gradient_as_bucket_view or find_unused_parameters asks for the buckets' layout).
// Read next: distributed_data_parallel.h.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"

namespace dplab {
class Node;
}

namespace dplab::parallel {

// A communication hook: start reducing `bucket` (a flat float32 tensor) and return the work;
// when it completes, bucket must hold the AVERAGE over ranks. Default: all_reduce(Avg).
using CommHook = std::function<WorkPtr(ProcessGroup& pg, Tensor& bucket)>;

struct BucketSlot {
  size_t param;    // index into the parameter list
  int64_t offset;  // in elements, into the bucket
  int64_t numel;
};

struct Bucket {
  Tensor flat;  // [total elements] on the parameters' device
  std::vector<BucketSlot> slots;
  int pending = 0;  // slots not yet ready in this backward
  WorkPtr work;     // the in-flight reduction
};

// Groups parameters (in the given order) into buckets of at most cap_bytes; a parameter
// larger than the cap gets a bucket of its own. Returns, per bucket, parameter indices.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params,
                                                int64_t cap_bytes);

class Reducer {
 public:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> pg, int64_t bucket_cap_bytes, bool find_unused_parameters,
          bool gradient_as_bucket_view, CommHook hook);
  // Parameters outlive their DDP wrapper: the hooks they keep become no-ops then.
  ~Reducer() { *self_ = nullptr; }
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called by every forward that records a graph, with the forward's output (the root of
  // the graph walk for unused parameters).
  void prepare_for_backward(const Tensor& output);
  void set_require_sync(bool on) { require_sync_ = on; }
  bool require_sync() const { return require_sync_; }
  size_t num_buckets() const { return buckets_.size(); }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t reductions_launched() const { return reductions_launched_; }  // since construction
  bool buckets_rebuilt() const { return rebuilt_; }
  // Parameters the last forward's graph walk found unused (find_unused_parameters only).
  const std::vector<size_t>& unused_parameters() const { return unused_; }

 private:
  void build_buckets(const std::vector<size_t>& order);  // params in `order`, cut at the cap
  void rebuild_buckets();                                // in the recorded ready order (rank 0's)
  void mark_ready(size_t param);                         // the post-accumulate hook
  void mark_unused(size_t param);                        // from the graph walk, before backward
  void launch_ready_buckets();     // in index order, as far as they are complete
  void finalize();                 // end of backward: wait, write back
  Tensor slot_view(size_t param);  // the parameter's slot, shaped like it

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<Node>> sinks_;  // each parameter's AccumulateGrad, held alive
  std::shared_ptr<ProcessGroup> pg_;
  int64_t cap_bytes_;
  bool find_unused_;
  bool grad_as_view_;
  CommHook hook_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<size_t> slot_of_;    // param -> slot within its bucket
  std::vector<bool> ready_;
  std::vector<size_t> unused_;
  std::vector<size_t> ready_order_;  // hook order in the first synchronised backward
  bool rebuilt_ = false;
  bool rebuild_pending_ = false;
  size_t next_bucket_ = 0;  // the next bucket to launch
  bool require_sync_ = true;
  bool backward_active_ = false;  // a finalize callback is queued for this backward
  int64_t reductions_launched_ = 0;
  bool solo_ = false;  // world size 1: hooks return at once (reducer.h)
  std::shared_ptr<Reducer*> self_ = std::make_shared<Reducer*>(this);  // what the hooks hold
};

}  // namespace dplab::parallel
