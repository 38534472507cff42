// Tutorial 13: seeds, logging and barriers, the habits of a program that runs N times.
// What you will learn:
//   - the duplicated-augmentation bug: seed every rank identically and every rank draws the
//     same "random" crops, so N ranks train on N copies of one augmentation; the fix is
//     seed + rank for the data's randomness (per_rank_seed), while the model init stays
//     identical anyway because DDP broadcasts rank 0's weights;
//   - rank-0 logging: info lines once (rank 0), warnings from every rank, each tagged;
//   - ZeroFirst: rank 0 prepares a shared cache first, the others wait, then reuse it.
// Run: 13_seeds_logging_barriers [--nproc N]   (default 3). Read 13_seeds_logging_barriers.md.
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "framework/dplab.h"
#include "framework/io/log.h"
#include "models/toy.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "parallel/ddp_utils/rank_utils.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace par = dplab::parallel;

namespace {

constexpr uint64_t kSeed = 42;

// A "random crop" of a 28x28 image to 24x24: the offsets (dx, dy) in [0, 4] each.
std::vector<int64_t> random_crops(int count) {
  return randint(0, 5, {count, 2}).to_vector<int64_t>();
}

// How many ranks drew the same crops as rank 0 (all_gather the draws, compare on rank 0).
int ranks_matching_rank0(par::ProcessGroup& pg, const std::vector<int64_t>& crops) {
  Tensor mine = from_vector(crops, {static_cast<int64_t>(crops.size())});
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(Tensor::empty(mine.shape(), mine.options()));
  pg.all_gather(all, mine);
  int same = 0;
  for (int r = 1; r < pg.size(); ++r) same += all[r].to_vector<int64_t>() == all[0].to_vector<int64_t>();
  return same;
}

std::string crops_str(const std::vector<int64_t>& c) {
  std::string s;
  for (size_t i = 0; i + 1 < c.size(); i += 2) s += fmt::format("({},{}) ", c[i], c[i + 1]);
  return s;
}

void worker(int rank) {
  par::init_process_group({.engine = "ring"});
  par::ProcessGroup& pg = par::default_process_group();
  const int world = pg.size();

  // ---- 1. seeds: the bug, then the fix ----
  manual_seed(kSeed);  // the bug: the same seed on every rank
  auto same = random_crops(4);
  fmt::print("rank {}: crops with seed {}: {}\n", rank, kSeed, crops_str(same));
  int dup = ranks_matching_rank0(pg, same);
  par::seed_per_rank(pg, kSeed);  // the fix: seed + rank
  auto fixed = random_crops(4);
  fmt::print("rank {}: crops with seed {} + rank: {}\n", rank, kSeed, crops_str(fixed));
  int dup_fixed = ranks_matching_rank0(pg, fixed);
  // Model init after per-rank seeding differs per rank... until DDP broadcasts rank 0's.
  auto model = std::make_shared<models::ToyModel>();
  float w_before = model->net1->weight.at({0, 0});
  std::shared_ptr<par::ProcessGroup> pg_ptr(&pg, [](par::ProcessGroup*) {});
  par::DistributedDataParallel ddp(model, {.process_group = pg_ptr});
  float w_after = model->net1->weight.at({0, 0});
  Tensor spread = par::reduce_tensor(pg, full({1}, w_after), par::ReduceOp::Max) -
                  par::reduce_tensor(pg, full({1}, w_after), par::ReduceOp::Min);
  fmt::print("rank {}: net1.weight[0,0] own init {:.6f}, after DDP's broadcast {:.6f}\n", rank, w_before, w_after);
  pg.barrier();
  if (rank == 0) {
    fmt::print("same seed: {} of {} other ranks drew rank 0's crops (the bug)\n", dup, world - 1);
    fmt::print("seed + rank: {} of {} other ranks drew rank 0's crops (fixed)\n", dup_fixed, world - 1);
    fmt::print("model weights differ across ranks after DDP's broadcast by {}\n", spread.item());
  }
  DPLAB_CHECK(dup == world - 1 && dup_fixed == 0 && spread.item() == 0.0f,
              "rank {}: seeds demo: {} duplicates with one seed, {} with seed + rank, spread {}", rank, dup,
              dup_fixed, spread.item());

  // ---- 2. rank-0 logging ----
  pg.barrier();
  std::ostringstream captured;  // what this rank's logger printed, to count it below
  set_log_stream(&captured);
  par::setup_rank_logging(rank);
  log_info("epoch 1: loss 0.42 (an info line: printed by rank 0 only)");
  log_warning("a warning: printed by every rank, tagged with its rank");
  set_log_stream(nullptr);
  std::fputs(captured.str().c_str(), stdout);
  std::fflush(stdout);
  const std::string text = captured.str();
  auto count = [&](const std::string& what) {
    int64_t c = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++c;
    return par::reduce_tensor(pg, from_vector(std::vector<int64_t>{c}, {1}), par::ReduceOp::Sum).item_int();
  };
  int64_t infos = count("INFO:"), warnings = count("WARNING:");
  if (rank == 0) fmt::print("log lines over all ranks: {} info, {} warnings\n", infos, warnings);
  DPLAB_CHECK(infos == 1 && warnings == world, "expected 1 info and {} warnings, got {} and {}", world, infos,
              warnings);

  // ---- 3. ZeroFirst: rank 0 prepares a cache, the others find it ready ----
  auto store = par::default_store();
  if (rank == 0)
    store->set("cache", (std::filesystem::temp_directory_path() / fmt::format("dplab_13_{}", getpid())).string());
  const std::string cache = store->get("cache");
  int64_t prepared_here = 0;
  {
    par::ZeroFirst z(pg);
    if (!std::filesystem::exists(cache)) {  // only the first rank inside finds no cache
      std::ofstream(cache) << "preprocessed dataset\n";
      prepared_here = 1;
    }
    fmt::print("rank {}: {}\n", rank, prepared_here ? "prepared the cache" : "found the cache rank 0 prepared");
    std::fflush(stdout);  // print now, inside the scope, so the lines show the real order
  }
  int64_t preparers =
      par::reduce_tensor(pg, from_vector(std::vector<int64_t>{prepared_here}, {1}), par::ReduceOp::Sum).item_int();
  if (rank == 0) fmt::print("ranks that prepared the cache: {} (rank 0 only)\n", preparers);
  DPLAB_CHECK(preparers == 1 && (rank != 0 || prepared_here == 1), "rank {}: {} ranks prepared the cache", rank,
              preparers);
  pg.barrier();
  if (rank == 0) std::filesystem::remove(cache);
  par::reset_rank_logging();
  par::destroy_process_group();
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 3;
  if (auto exit = tutorials::parse_int_options(
          argc, argv, "Tutorial 13: per-rank seeds, rank-0 logging, zero_first",
          {{"--nproc", &nproc, "ranks to spawn (at least 2, or nothing differs)", 2, 64}}))
    return *exit;
  return tutorials::run_spawned("13_seeds_logging_barriers", nproc, worker);
}
