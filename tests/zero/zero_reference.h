// zero_reference.h: the job every ZeRO parity test runs (threads, shm processes, mpirun), and
// the two answers it must equal: one process with the plain optimizer on the concatenated
// batches, and DDP with the plain optimizer. ToyModel 10-10-5 has 100, 10, 50 and 5
// parameters: for N = 3 and 4 most shards are uneven (the 5-element bias splits 2, 1, 1, 1).
// Read next: test_zero.cpp.
#pragma once
#include <memory>
#include <variant>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/zero/zero_redundancy_optimizer.h"
#include "tests/ddp/ddp_reference.h"

namespace dplab::parallel::testing {

inline const InnerOptions kSgd = optim::SGDOptions{.lr = 0.05, .momentum = 0.9};
inline const InnerOptions kAdam = optim::AdamOptions{.lr = 0.01};

inline std::unique_ptr<optim::Optimizer> plain_optimizer(std::vector<Tensor> params,
                                                         const InnerOptions& o) {
  if (const auto* a = std::get_if<optim::AdamOptions>(&o))
    return std::make_unique<optim::Adam>(params, *a);
  return std::make_unique<optim::SGD>(params, std::get<optim::SGDOptions>(o));
}

// The initial weights (seed 0), made once, outside rank threads (the generator is shared).
inline const StateDict& zero_initial_weights() {
  static StateDict sd = [] {
    manual_seed(0);
    return models::ToyModel().state_dict();
  }();
  return sd;
}

// Steps [first, first + count) of the reference job on one process: the global batch.
inline void train_single(nn::Module& model, optim::Optimizer& opt, int world, int first,
                         int count) {
  for (int s = first; s < first + count; ++s) {
    opt.zero_grad();
    mse_loss(model.forward(batch_x(s, world)), batch_y(s, world)).backward();
    opt.step();
  }
}

// The same steps on rank `rank`: its rows of the global batch.
inline void train_rank(nn::Module& model, optim::Optimizer& opt, int world, int rank, int first,
                       int count) {
  for (int s = first; s < first + count; ++s) {
    opt.zero_grad();
    Tensor x = batch_x(s, world).narrow(rank * kPerRank, kPerRank);
    Tensor y = batch_y(s, world).narrow(rank * kPerRank, kPerRank);
    mse_loss(model.forward(x), y).backward();
    opt.step();
  }
}

inline Params zero_single_process(int world, const InnerOptions& o) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(zero_initial_weights());
  auto opt = plain_optimizer(model->parameters(), o);
  train_single(*model, *opt, world, 0, kSteps);
  return params_of(*model);
}

// How ZeRO meets DDP in a run: not at all, DDP averages first (stage 1, PyTorch's way), or
// DDP only buckets (zero_local_gradients_hook) and ZeRO reduce-scatters.
enum class WithDdp { No, Averaged, LocalHook };

inline Params zero_run(std::shared_ptr<ProcessGroup> pg, int stage, const InnerOptions& o,
                       WithDdp with) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(zero_initial_weights());
  std::shared_ptr<nn::Module> trained = model;
  if (with != WithDdp::No) {
    auto ddp = std::make_shared<DistributedDataParallel>(model, DDPOptions{.process_group = pg});
    if (with == WithDdp::LocalHook) ddp->register_comm_hook(zero_local_gradients_hook());
    trained = ddp;
  }
  ZeroRedundancyOptimizer opt(
      trained->parameters(), o,
      {.stage = stage, .process_group = pg, .gradients_averaged = with == WithDdp::Averaged});
  train_rank(*trained, opt, pg->size(), pg->rank(), 0, kSteps);
  return params_of(*model);
}

// DDP with the plain optimizer, the thing ZeRO must equal.
inline Params plain_ddp_run(std::shared_ptr<ProcessGroup> pg, const InnerOptions& o) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(zero_initial_weights());
  auto ddp = std::make_shared<DistributedDataParallel>(model, DDPOptions{.process_group = pg});
  auto opt = plain_optimizer(ddp->parameters(), o);
  train_rank(*ddp, *opt, pg->size(), pg->rank(), 0, kSteps);
  return params_of(*model);
}

inline float max_abs_diff(const Params& a, const Params& b) {
  float d = a.size() == b.size() ? 0.0f : 1e30f;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    if (a[k].size() != b[k].size()) return 1e30f;
    for (size_t i = 0; i < a[k].size(); ++i) d = std::max(d, std::abs(a[k][i] - b[k][i]));
  }
  return d;
}

}  // namespace dplab::parallel::testing
