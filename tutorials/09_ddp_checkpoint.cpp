// Tutorial 09: saving and loading checkpoints under DDP (PyTorch's demo_checkpoint).
// What you will learn:
//   - why only rank 0 saves (every rank holds the same weights: N writers would race on one
//     file for nothing), and why the others must wait for it (a barrier) before loading;
//   - map_location: the file was written from cpu:0, rank r loads it onto its own cpu:r;
//   - that the file holds the inner module's names, so it loads outside DDP as well;
//   - that training continues from the loaded state on every rank, still in lock-step.
// Run: 09_ddp_checkpoint [--nproc N]   (default 2). Read 09_ddp_checkpoint.md.
#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "framework/dplab.h"
#include "framework/io/safetensors.h"
#include "framework/optim/sgd.h"
#include "models/toy.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/ddp_checkpoint.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp/distributed_eval.h"
#include "parallel/launch/spawn.h"

using namespace dplab;
namespace par = dplab::parallel;

namespace {

float max_param_spread(nn::Module& m, par::ProcessGroup& pg) {
  float spread = 0;
  for (const Tensor& p : m.parameters()) {
    Tensor hi = par::reduce_tensor(pg, p, par::ReduceOp::Max);
    Tensor lo = par::reduce_tensor(pg, p, par::ReduceOp::Min);
    spread = std::max(spread, max(abs(hi - lo)).item());
  }
  return spread;
}

void train_step(par::DistributedDataParallel& ddp, optim::SGD& opt, Device dev) {
  opt.zero_grad();
  mse_loss(ddp.forward(randn({20, 10}).to(dev)), randn({20, 5}).to(dev)).backward();
  opt.step();
}

void demo_checkpoint(int rank) {
  par::init_process_group({.backend = "ring"});
  par::ProcessGroup& pg = par::default_process_group();
  std::shared_ptr<par::ProcessGroup> pg_ptr(&pg, [](par::ProcessGroup*) {});
  const Device dev(DeviceKind::CPU, rank);

  // Rank 0 picks the file name and tells the others through the rendezvous store.
  auto store = par::default_store();
  if (rank == 0)
    store->set("ckpt_path", (std::filesystem::temp_directory_path() /
                             fmt::format("dplab_09_{}.safetensors", getpid())).string());
  const std::string path = store->get("ckpt_path");

  manual_seed(static_cast<uint64_t>(rank));  // data differ per rank; DDP equalises weights
  auto model = std::make_shared<models::ToyModel>();
  model->to(dev);
  par::DistributedDataParallel ddp(model, {.process_group = pg_ptr});
  optim::SGD opt(ddp.parameters(), {.lr = 0.001, .momentum = 0.9});
  train_step(ddp, opt, dev);

  // 1. rank 0 saves; the others wait inside until the file is complete (a barrier).
  par::save_checkpoint_on_rank0(pg, path, ddp, &opt, {{"step", "1"}});
  if (rank == 0) {
    Loaded f = load_safetensors(path);
    std::string names;
    for (const auto& k : f.tensors.keys())
      if (k.rfind(kOptimPrefix, 0) != 0) names += k + " ";
    fmt::print("rank 0 saved {} ({} bytes); model keys: {}\n", path,
               std::filesystem::file_size(path), names);
  }

  // 2. A fresh model (another init) on every rank, loaded with map_location = cpu:rank.
  manual_seed(1000 + static_cast<uint64_t>(rank));
  auto fresh = std::make_shared<models::ToyModel>();
  fresh->to(dev);
  par::DistributedDataParallel ddp2(fresh, {.process_group = pg_ptr});
  optim::SGD opt2(ddp2.parameters(), {.lr = 0.001, .momentum = 0.9});
  Metadata meta = par::load_checkpoint_on_all_ranks(pg, path, ddp2, &opt2, dev);
  float diff = 0;
  for (size_t i = 0; i < model->parameters().size(); ++i)
    diff = std::max(diff, max(abs(model->parameters()[i] - fresh->parameters()[i])).item());
  fmt::print("rank {}: loaded step {} onto {}; |loaded - saved| = {}\n", rank, meta.at("step"),
             fresh->parameters()[0].device(), diff);
  DPLAB_CHECK(diff == 0.0f && fresh->parameters()[0].device() == dev,
              "rank {}: loaded weights differ by {} or sit on {}", rank, diff, fresh->parameters()[0].device());

  // 3. Continue training from the loaded state: the replicas stay identical.
  for (int s = 0; s < 3; ++s) train_step(ddp2, opt2, dev);
  float spread = max_param_spread(*fresh, pg);
  if (rank == 0) fmt::print("after 3 more steps, max |difference| of parameters across ranks: {}\n", spread);
  DPLAB_CHECK(spread == 0.0f, "rank {}: replicas differ by {} after resuming", rank, spread);

  pg.barrier();  // nobody reads the file any more
  if (rank == 0) std::filesystem::remove(path);
  par::destroy_process_group();
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--nproc") == 0 && i + 1 < argc) {
      nproc = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--nproc N]\n", argv[0]);
      return 2;
    }
  }
  try {
    par::spawn(demo_checkpoint, nproc);
    fmt::print("checkpoint saved by rank 0, loaded by all {} ranks, training continued\n", nproc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "09_ddp_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
