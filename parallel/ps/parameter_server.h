// parameter_server.h: a sharded parameter server (Li et al., OSDI 2014; TensorFlow's ps tasks,
// BytePS), as an optimizer every rank of the group constructs and steps.
//
// The parameters, flattened, are cut into S contiguous shards (algorithms/server_plan.h); each
// server holds one shard's master weights and optimizer state. A step:
//   push   every worker sends each shard of its gradient to that shard's server, which sums
//          the W copies (ProcessGroup::ps_push);
//   step   each server divides by W and runs the inner optimizer (SGD or Adam, unchanged) on
//          its shard: only it keeps that shard's momentum / Adam moments;
//   pull   every worker fetches each updated shard from its server (ps_pull) into its model.
// Synchronous, so training equals one device on the whole batch, as DDP does.
// Servers are co-located with workers (every rank trains; S = N moves the ring's bytes, S = 1
// is the star) or separate processes (the last S ranks only serve: they call step() and
// nothing else, and need no gradients). DataParallel (dp/) is the same idea inside one process.
//
//   ParameterServer opt(model->parameters(), optim::SGDOptions{.lr = 0.05}, {.servers = 2});
//   if (opt.is_worker()) { opt.zero_grad(); loss_of(opt.worker_index()).backward(); }
//   opt.step();                                       // every rank, servers included
// The folder parallel/ps/ is this optimizer alone; start here. Its exchanges are in
// algorithms/ (server_plan.h, ps.cpp); its inner optimizer's options come from zero/.
// Read next: parameter_server.cpp, algorithms/ps.cpp (the exchanges), docs/parameter_server.md.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/algorithms/server_plan.h"
#include "parallel/comm/process_group.h"
#include "parallel/zero/zero_redundancy_optimizer.h"  // InnerOptions

namespace dplab::parallel {

struct PsOptions {
  int servers = 1;        // S
  bool colocated = true;  // servers also train; false: the last S ranks only serve
  std::shared_ptr<ProcessGroup> process_group{};  // default: default_process_group()
};

class ParameterServer : public optim::Optimizer {
 public:
  // Collective. Every rank passes the same parameters (shapes, order; float32, one device);
  // a separate server's are only read for their shapes (it keeps no reference to them).
  // The first worker's values become everyone's (one broadcast), as DDP's construction does.
  // Throws Error on every rank when the ranks' parameters differ in count or size, S is out
  // of range (server_plan.h) or S exceeds the parameters' elements.
  ParameterServer(std::vector<Tensor> params, InnerOptions inner, PsOptions opts = {});

  // Collective: every rank calls it once per step, servers included. On a worker every
  // parameter must have a .grad (this worker's gradient, of its share of the batch).
  void step() override;

  const ServerPlan& plan() const { return plan_; }
  bool is_worker() const { return plan_.is_worker(pg_->rank()); }
  bool is_server() const { return plan_.is_server(pg_->rank()); }
  int workers() const { return plan_.workers(pg_->size()); }
  // This rank's index among the workers, in [0, W): which share of the batch it trains.
  int worker_index() const;
  // Bytes this rank holds as a server: its shard's master weights and optimizer state (0 on a
  // rank that serves nothing).
  int64_t shard_weight_bytes() const;
  int64_t optimizer_state_bytes() const;

  // The optimizer state is spread over the servers: not saved here (save the model, which
  // every worker holds after step()). Both throw an Error that says so.
  void state_dict(StateDict& tensors, Metadata& meta) const override;
  void load_state_dict(const StateDict& tensors, const Metadata& meta) override;

 private:
  std::shared_ptr<ProcessGroup> pg_;
  ServerPlan plan_;
  Tensor flat_;    // gradients in, weights out: P on a worker, the shard on a separate server
  Tensor master_;  // the shard's master weights (a server only)
  std::unique_ptr<optim::Optimizer> inner_;  // SGD or Adam over master_ (a server only)
};

}  // namespace dplab::parallel
