// Tutorial 09: saving and loading checkpoints under DDP (PyTorch's demo_checkpoint).
// What you will learn:
//   - why only rank 0 saves (every rank holds the same weights: N writers would race on one
//     file for nothing), and why the others must wait for it (a barrier) before loading;
//   - map_location: the file was written from cpu:0, rank r loads it onto its own cpu:r;
//   - that the file holds the inner module's names, so it loads outside DDP as well;
//   - that training continues from the loaded state on every rank, still in lock-step;
//   - that lines printed by different processes interleave in whatever order they reach the
//     terminal: print_in_rank_order takes turns (a barrier per rank) so the output reads in
//     the order things happened.
// Run: 09_ddp_checkpoint [--nproc N]   (default 2). Read 09_ddp_checkpoint.md.
#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "framework/dplab.h"
#include "framework/io/safetensors.h"
#include "framework/optim/sgd.h"
#include "models/toy.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp_utils/ddp_checkpoint.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

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

// Rank 0 prints its line first, then rank 1, ...: each rank flushes before the barrier that
// lets the next one go. N barriers: fine for a tutorial's few lines, not for a training loop.
void print_in_rank_order(par::ProcessGroup& pg, const std::string& line) {
  for (int r = 0; r < pg.size(); ++r) {
    if (r == pg.rank()) {
      fmt::print("{}", line);
      std::fflush(stdout);
    }
    pg.barrier();
  }
}

void train_step(par::DistributedDataParallel& ddp, optim::SGD& opt, Device dev) {
  opt.zero_grad();
  mse_loss(ddp.forward(randn({20, 10}).to(dev)), randn({20, 5}).to(dev)).backward();
  opt.step();
}

void demo_checkpoint(int rank) {
  par::init_process_group({.engine = "ring"});
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
    std::string names;  // in the module's order (the file's own index is sorted by name)
    for (const auto& [k, t] : model->state_dict())
      if (f.tensors.contains(k)) names += (names.empty() ? "" : " ") + k;
    fmt::print("rank 0 saved {} ({} bytes); model keys: {}\n", path,
               std::filesystem::file_size(path), names);
    std::fflush(stdout);  // before the next lines, which other processes print
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
  print_in_rank_order(pg, fmt::format("rank {}: loaded step {} onto {}; |loaded - saved| = {}\n", rank,
                                      meta.at("step"), fresh->parameters()[0].device(), diff));
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
  if (auto exit = tutorials::parse_int_options(argc, argv, "Tutorial 09: checkpoints under DDP",
                                                {{"--nproc", &nproc, "ranks to spawn", 1, 64}}))
    return *exit;
  return tutorials::run_spawned(
      "09_ddp_checkpoint", nproc, demo_checkpoint,
      fmt::format("checkpoint saved by rank 0, loaded by all {} ranks, training continued", nproc));
}
