// distributed_data_parallel.h: torch.nn.parallel.DistributedDataParallel over our process
// groups (ring or star all-reduce over shared memory, or MPI).
//
// One process per device, each with a full replica. At construction rank 0's parameters
// and buffers are broadcast, so every rank starts identical whatever its seed. Each
// backward all-reduces (averages) gradients bucket by bucket while it is still running
// (reducer.h); when backward returns, every rank holds the same averaged .grad and its
// optimizer takes the same step. Nothing is gathered anywhere: no master, no imbalance.
//
//   auto ddp = std::make_shared<DistributedDataParallel>(model, DDPOptions{.bucket_cap_mb = 25});
//   loss = loss_fn(ddp->forward(x), y); loss.backward(); optimizer.step();
//   { auto guard = ddp->no_sync(); ddp->forward(x1)...backward(); }   // accumulate locally
// The folder parallel/ddp/ is DDP and what it brings (start here): reducer.h (buckets, hooks,
// overlap, no_sync), compression.h (the fp16 comm hook), sync_batch_norm.h (statistics over
// the ranks' slices of one batch). Beside it: ddp_utils/ (a DDP script's sampler, evaluation,
// rank habits, checkpoints), zero/, ps/ and horovod/.
// Read next: reducer.h, then sync_batch_norm.h.
#pragma once
#include <memory>
#include <optional>

#include "framework/nn/module.h"
#include "parallel/ddp/reducer.h"

namespace dplab::parallel {

struct DDPOptions {
  std::optional<Device> device{};  // if set, every parameter must be here; unset, a model may span
                                   // devices (model parallel) and buckets never mix devices
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;  // walk the graph from each forward's output; what it cannot
                                        // reach is marked ready at once (its .grad, or zeros)
  bool broadcast_buffers = true;  // rank 0's buffers (BN running stats) re-sent every training
                                  // forward (not in eval, so rank-0-only evaluation cannot hang)
  bool gradient_as_bucket_view = false;  // .grad is a view of its bucket slot; keep it one with
                                         // zero_grad(/*set_to_none=*/false): one gradient copy less
  std::optional<Algorithm> algorithm{};  // ring or star; default: the group's
  std::shared_ptr<ProcessGroup> process_group{};  // default: default_process_group()
  CommHook comm_hook{};                           // default: all_reduce(Avg) with `algorithm`
};

class DistributedDataParallel : public nn::Module {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions opts = {});

  Tensor forward(const Tensor& x) override;
  std::string name() const override;

  // Gradients accumulate locally inside the returned scope; the first backward after it
  // all-reduces the sum (gradient accumulation without K all-reduces).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& r) : r_(r), prev_(r.require_sync()) {
      r_.set_require_sync(false);
    }
    ~NoSyncGuard() { r_.set_require_sync(prev_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer& r_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*reducer_); }

  // Replaces how buckets are reduced (e.g. fp16_compress_hook()).
  void register_comm_hook(CommHook hook);

  nn::Module& module() { return *module_; }
  std::shared_ptr<nn::Module> module_ptr() { return module_; }
  ProcessGroup& process_group() { return *pg_; }
  const Reducer& reducer() const { return *reducer_; }

 private:
  void build_reducer();

  std::shared_ptr<nn::Module> module_;
  DDPOptions opts_;
  std::shared_ptr<ProcessGroup> pg_;
  std::unique_ptr<Reducer> reducer_;
};

// The default hook: average with an all-reduce of the given algorithm.
CommHook allreduce_hook(std::optional<Algorithm> algo = std::nullopt);

}  // namespace dplab::parallel
