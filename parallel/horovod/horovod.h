// horovod.h: a Horovod-style API (import horovod.torch as hvd) over dplab's process groups,
// to show that Horovod and DDP are the same idea with a different surface:
//   hvd::init();                                             // init_process_group()
//   hvd::broadcast_parameters(*model, /*root_rank=*/0);      // everyone starts equal
//   hvd::DistributedOptimizer opt(std::make_shared<optim::SGD>(...), model->named_parameters(),
//                                 parallel::Compression::fp16);
//   opt.zero_grad(); loss.backward(); opt.step();            // step() waits, then updates
// DDP buckets gradients inside a module wrapper; Horovod leaves the module alone and hooks
// the OPTIMIZER: each parameter's gradient is all-reduced (averaged) asynchronously as soon
// as backward finishes it, and step() waits for all of them before updating. One all-reduce
// per parameter (Horovod's tensor fusion, which batches them, is DDP's bucketing again).
// The folder parallel/horovod/ is this API alone; start here. Its fp16 compression is DDP's
// (ddp/compression.h), so the two surfaces move the same bytes.
// Read next: horovod.cpp, ddp/compression.h, tutorials/15_horovod_style.md.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/compression.h"

namespace dplab::parallel::hvd {

using parallel::Compression;

// Joins the default process group (env:// from dplab-run, spawn, mpirun or srun) unless one
// exists already. rank() / size() are the default group's; local_rank() is the rank within
// this node (LOCAL_RANK or the MPI / Slurm equivalent; the global rank when none is set).
void init(const InitOptions& opts = {});
int rank();
int size();
int local_rank();
void shutdown();  // destroy_process_group(), on every rank

// Copies root_rank's values into every rank's tensors, in place (parameters and buffers for
// a module; every entry for a state dict). pg defaults to the default group.
void broadcast_parameters(nn::Module& module, int root_rank, ProcessGroup* pg = nullptr);
void broadcast_parameters(const StateDict& state, int root_rank, ProcessGroup* pg = nullptr);

class DistributedOptimizer : public optim::Optimizer {
 public:
  // Wraps `inner`, which must hold exactly these parameters (any order). pg: the default
  // group when null (tests pass their own). Every rank must give the same parameters.
  DistributedOptimizer(std::shared_ptr<optim::Optimizer> inner,
                       const std::vector<std::pair<std::string, Tensor>>& named_parameters,
                       Compression compression = Compression::none,
                       std::shared_ptr<ProcessGroup> pg = nullptr);
  ~DistributedOptimizer() override { *self_ = nullptr; }
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Waits for every launched all-reduce (each .grad then holds the average over ranks),
  // then runs the wrapped optimizer's step.
  void step() override;
  // Waits only (for clipping or inspecting averaged gradients before step()).
  void synchronize();

  void state_dict(StateDict& tensors, Metadata& meta) const override {
    inner_->state_dict(tensors, meta);
  }
  void load_state_dict(const StateDict& tensors, const Metadata& meta) override {
    inner_->load_state_dict(tensors, meta);
  }
  optim::Optimizer& inner() { return *inner_; }
  int64_t allreduces_launched() const { return launched_; }  // since construction

 private:
  void on_gradient_ready(size_t index);  // the per-parameter hook

  std::shared_ptr<optim::Optimizer> inner_;
  std::vector<std::string> names_;
  Compression compression_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<WorkPtr> pending_;  // per parameter: the in-flight average, or null
  std::vector<bool> averaged_;    // per parameter: .grad holds the average (waited for)
  int64_t launched_ = 0;
  std::shared_ptr<DistributedOptimizer*> self_ = std::make_shared<DistributedOptimizer*>(this);
};

}  // namespace dplab::parallel::hvd
