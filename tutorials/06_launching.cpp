// 06_launching.cpp: one program, launched two ways.
// What you will learn:
//   - how a rank learns who it is (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
//   - launching with the dplab-run launcher:   dplab-run --nproc-per-node 3 ./06_launching
//   - launching from inside the program:       ./06_launching        (calls spawn(worker, 3))
//   - that init_process_group() is the same call either way, and what the store is for.
// Read 06_launching.md beside this file for the walk-through.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/comm/init.h"
#include "parallel/launch/spawn.h"

namespace par = dplab::parallel;

constexpr int kWorldSize = 3;  // used when the program spawns its own ranks

// The per-rank program. Whoever started this process (dplab-run or spawn) has set the
// rendezvous variables; init_process_group reads them and meets the other ranks through the
// TCP store that rank 0 hosts on MASTER_ADDR:MASTER_PORT.
void worker(int rank) {
  par::RankInfo info = par::rank_info_from_env();
  par::init_process_group({.engine = "ring", .timeout = par::Seconds(30.0)});
  int world = par::get_world_size();
  std::printf("rank %d of %d: local rank %d, store at %s:%d\n", rank, world, info.local_rank,
              info.master_addr.c_str(), info.master_port);

  // 1. The store: a shared dictionary of strings. Every rank writes its own key and reads
  //    its neighbour's; get() waits until the key exists, so no barrier is needed.
  auto store = par::default_store();
  store->set("greeting/" + std::to_string(rank), "hello from pid " + std::to_string(getpid()));
  int left = (rank + world - 1) % world;
  std::string from_left = store->get("greeting/" + std::to_string(left));
  std::printf("rank %d: rank %d says \"%s\"\n", rank, left, from_left.c_str());

  // 2. A collective: every rank contributes rank + 1; after the all-reduce every rank holds
  //    1 + 2 + ... + world = world * (world + 1) / 2 (6 for three ranks).
  dplab::Tensor t = dplab::full({4}, static_cast<double>(rank + 1));
  par::default_process_group().all_reduce(t);
  std::printf("rank %d: all_reduce(rank + 1) = %.0f (expected %d)\n", rank, t.at({0}),
              world * (world + 1) / 2);

  par::destroy_process_group();
}

int main() {
  // Launched by dplab-run (or torchrun, mpirun, srun): this process is already one rank.
  // Inside spawn()'s children RANK is set too, but there main() must reach spawn() again,
  // which then runs worker in the child, so spawned children take the second branch.
  bool launched = std::getenv("RANK") != nullptr && !par::is_spawned_child();
  try {
    if (launched) {
      worker(par::rank_info_from_env().rank);
    } else {
      // Not launched: start kWorldSize copies of this program and run worker in each.
      // Note that main() runs again from the top in each child (spawn.h explains why).
      if (!par::is_spawned_child()) std::printf("spawning %d ranks\n", kWorldSize);
      par::spawn(worker, kWorldSize);
      std::printf("all %d ranks finished\n", kWorldSize);
    }
  } catch (const dplab::Error& e) {
    std::fprintf(stderr, "06_launching: %s\n", e.what());
    return 1;
  }
  return 0;
}
