// Tutorial 08: DistributedDataParallel, the basic use (PyTorch's "Getting started with DDP").
// What you will learn:
//   - the four lines that turn a training loop into a DDP one: init_process_group, move the
//     model to this rank's device, wrap it in DistributedDataParallel, destroy_process_group;
//   - that ranks start from different random inits and different data, yet end every step
//     with identical parameters (DDP broadcasts rank 0's weights once, then averages grads);
//   - how to check that claim across processes: all_reduce Max and Min of the parameters.
// Run: 08_ddp_basic [--nproc N]   (spawns N ranks, default 2). Read 08_ddp_basic.md.
#include <fmt/core.h>

#include <string>

#include "framework/dplab.h"
#include "framework/optim/sgd.h"
#include "models/toy.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace par = dplab::parallel;

namespace {

constexpr int kSteps = 10;

// The largest |p_rank - p_other| over all parameters and all ranks: max over ranks minus
// min over ranks, element by element. 0 means the replicas are bit-identical.
float max_param_spread(nn::Module& m, par::ProcessGroup& pg) {
  float spread = 0;
  for (const Tensor& p : m.parameters()) {
    Tensor hi = par::reduce_tensor(pg, p, par::ReduceOp::Max);
    Tensor lo = par::reduce_tensor(pg, p, par::ReduceOp::Min);
    spread = std::max(spread, max(abs(hi - lo)).item());
  }
  return spread;
}

void demo_basic(int rank) {
  par::init_process_group({.engine = "ring"});
  par::ProcessGroup& pg = par::default_process_group();
  const Device dev(DeviceKind::CPU, rank);  // on a GPU box: Device(DeviceKind::CUDA, rank)

  // A different seed per rank: different initial weights AND different data per rank.
  manual_seed(static_cast<uint64_t>(rank));
  auto model = std::make_shared<models::ToyModel>();
  model->to(dev);
  std::shared_ptr<par::ProcessGroup> pg_ptr(&pg, [](par::ProcessGroup*) {});
  const float spread_before = max_param_spread(*model, pg);  // before DDP: ranks differ
  par::DistributedDataParallel ddp(model, {.process_group = pg_ptr});  // broadcasts rank 0's weights

  optim::SGD opt(ddp.parameters(), {.lr = 0.001});
  Tensor x = randn({20, 10}).to(dev);  // this rank's batch
  Tensor y = randn({20, 5}).to(dev);
  float before = 0, after = 0;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(ddp.forward(x), y);
    if (step == 0) before = loss.item();
    loss.backward();  // gradients are averaged over the ranks while backward runs
    opt.step();       // every rank applies the same averaged gradient
  }
  {
    NoGradGuard no_grad;
    after = mse_loss(ddp.forward(x), y).item();
  }
  fmt::print("rank {}: loss on its own batch before {:.6f}, after {} steps {:.6f}\n", rank, before,
             kSteps, after);

  // The mean loss over ranks is what the averaged gradient descends.
  float mean_before = par::reduce_tensor(pg, full({1}, before)).item();
  float mean_after = par::reduce_tensor(pg, full({1}, after)).item();
  const float spread_after = max_param_spread(*model, pg);
  if (rank == 0) {
    fmt::print("mean loss over {} ranks: before {:.6f}, after {:.6f}\n", pg.size(), mean_before, mean_after);
    fmt::print("max |difference| of parameters across ranks: before DDP {:.6f}, after training {}\n",
               spread_before, spread_after);
  }
  DPLAB_CHECK(spread_after == 0.0f, "rank {}: replicas differ by {} after training", rank, spread_after);
  DPLAB_CHECK(pg.size() == 1 || spread_before > 0.0f, "rank {}: the ranks started identical: nothing shown", rank);
  DPLAB_CHECK(mean_after < mean_before, "mean loss did not fall: {} -> {}", mean_before, mean_after);
  par::destroy_process_group();
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 2;
  if (auto exit = tutorials::parse_int_options(argc, argv, "Tutorial 08: DistributedDataParallel, the basic use",
                                                {{"--nproc", &nproc, "ranks to spawn", 1, 64}}))
    return *exit;
  if (!par::is_spawned_child()) fmt::print("running DDP on {} ranks\n", nproc);
  return tutorials::run_spawned("08_ddp_basic", nproc, demo_basic,
                                fmt::format("all {} ranks finished with identical parameters", nproc));
}
