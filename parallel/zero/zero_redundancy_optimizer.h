// zero_redundancy_optimizer.h: ZeRO stages 1 and 2 (Rajbhandari et al., 2020), in the shape of
// torch.distributed.optim.ZeroRedundancyOptimizer and DeepSpeed's ZeRO.
//
// Plain data parallelism keeps on every rank a full copy of the parameters (4 bytes each),
// of the gradients (4) and of the optimizer state (SGD momentum 4, Adam 8). ZeRO cuts every
// parameter into N shards, one per rank (the shards of the ring: chunk_elems), and rank r
// alone keeps the optimizer state of shard r and steps it:
//   stage 1: optimizer state sharded;             per rank 4P + 4P   + 8P/N  (Adam)
//   stage 2: gradients sharded too (after the     per rank 4P + 4P/N + 8P/N
//            reduce-scatter the full one is freed)
// A step is a reduce-scatter of each gradient (rank r receives the average of shard r only),
// the inner optimizer's step on shard r, and an all-gather of the updated shards: together
// the bytes of one all-reduce, so ZeRO costs no bandwidth (zero_redundancy_optimizer.cpp).
//
//   ZeroRedundancyOptimizer opt(model->parameters(), optim::AdamOptions{.lr = 1e-3}, {.stage = 2});
//   opt.zero_grad(); loss.backward(); opt.step();          // without DDP: ZeRO reduces
//   ddp.register_comm_hook(zero_local_gradients_hook());   // with DDP: DDP only buckets...
//   ZeroRedundancyOptimizer opt(ddp.parameters(), sgd_options, {.stage = 2});  // ...ZeRO reduces
// With DDP's default hook the gradients arrive averaged: pass .gradients_averaged = true and
// ZeRO only all-gathers (PyTorch's ZeroRedundancyOptimizer: all-reduce + all-gather).
// Construct ZeRO after DDP (its stage-2 hook must run after DDP's has read the gradient).
// Backends: ring, star (whose group runs reduce_scatter and all_gather as the ring too: only
// all_reduce has a star form) and mpi; the traffic counters are the collectives'.
// The folder parallel/zero/ is this optimizer alone; start here. It borrows one type from
// ddp/ (the comm hook of reducer.h), and ps/ borrows its InnerOptions.
// Read next: zero_redundancy_optimizer.cpp, then tutorials/18_zero.md.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "parallel/ddp/reducer.h"

namespace dplab::parallel {

struct ZeroOptions {
  int stage = 1;                                  // 1: shard optimizer state; 2: and gradients
  std::shared_ptr<ProcessGroup> process_group{};  // default: default_process_group()
  bool gradients_averaged =
      false;  // .grad is already the average (DDP's default hook): no reduce-scatter
};

using InnerOptions = std::variant<optim::SGDOptions, optim::AdamOptions>;

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // Every rank passes the same parameters (same shapes, same order). Throws on a stage other
  // than 1 or 2, a parameter that is not float32, or one not on this rank's device.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, InnerOptions inner, ZeroOptions opts = {});
  ~ZeroRedundancyOptimizer() override;

  // Collective: every rank calls it. Every parameter must have a .grad on every rank. Stage 2
  // without DDP reduce-scatters each gradient during backward, as soon as it is final (a
  // post-accumulate hook), so one backward per step: no accumulation over micro-batches.
  void step() override;

  int stage() const { return opts_.stage; }
  // Shard of parameter i that this rank owns: [offset, offset + numel) of its flattened values.
  int64_t shard_offset(size_t i) const;
  int64_t shard_numel(size_t i) const;
  // Bytes of optimizer state this rank holds (momentum or exp_avg + exp_avg_sq of its shards),
  // and of gradient shards it keeps after a stage-2 step.
  int64_t optimizer_state_bytes() const;
  int64_t gradient_shard_bytes() const;

  // Collective: gathers every rank's shard of the state onto `to_rank`, as one state dict of
  // the plain (unsharded) optimizer. Afterwards state_dict() on to_rank returns it.
  void consolidate_state_dict(int to_rank = 0);
  // On the rank that consolidated: the plain SGD / Adam state dict (loads into optim::SGD /
  // optim::Adam over the same parameters). Elsewhere, or before consolidating: throws.
  void state_dict(StateDict& tensors, Metadata& meta) const override;
  // Takes a plain optimizer's state dict (every rank passes the same one) and keeps its shard.
  void load_state_dict(const StateDict& tensors, const Metadata& meta) override;

 private:
  Tensor padded_chunk(const Tensor& flat, int j) const;  // chunk j of a flat tensor, padded to c
  int64_t padded_numel(size_t i) const;                  // c: the longest chunk of parameter i
  void reduce_gradient(size_t i);                        // step 1 for parameter i

  InnerOptions inner_options_;
  ZeroOptions opts_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<size_t> owned_;                // parameters whose shard here is non-empty
  std::vector<Tensor> shards_;               // views into those parameters' shard r
  std::unique_ptr<optim::Optimizer> inner_;  // SGD or Adam over shards_
  std::vector<int64_t> progress_;            // per parameter: steps its state has taken
  std::vector<Tensor> reduced_;  // per parameter: my shard's average gradient, once reduced
  std::shared_ptr<ZeroRedundancyOptimizer*> self_ =
      std::make_shared<ZeroRedundancyOptimizer*>(this);
  StateDict consolidated_;
  Metadata consolidated_meta_;
  bool have_consolidated_ = false;
};

// A DDP communication hook that leaves each bucket as this rank computed it (no reduction):
// DDP still buckets, and ZeRO's step reduce-scatters instead, so stage 2 moves the bytes of
// one all-reduce with DDP too. The only thing ZeRO asks of DDP (its CommHook, unchanged).
CommHook zero_local_gradients_hook();

}  // namespace dplab::parallel
