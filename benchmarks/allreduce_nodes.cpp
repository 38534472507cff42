// allreduce_nodes.cpp: the rows of bench_allreduce that need dplab-run: the gloo engine's
// all-reduce (gloo's own ring), and, with --nodes K, dplab's algorithms over the node
// transport (shm inside a node, gloo's TCP wire between nodes). bench_allreduce starts K
// dplab-run launchers on 127.0.0.1 (--nnodes K, one per pretended node) running this.
// Each engine gets its own group on the job's store; the timing rule is bench_allreduce's:
// ~256 MiB of payload per loop (3 to 200 calls), one untimed loop, best of T trials, each
// trial timing every engine once in turn, the slowest rank's time.
// Usage (bench_allreduce runs it): allreduce_nodes --engines gloo,ring,... [--trials T] BYTES...
// Rank 0 prints "<engine> <bytes> <seconds> <what ran>" per engine and size.
// Read next: allreduce.cpp, parallel/transport/node_transport.h.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/comm/init.h"

using namespace dplab;
using namespace dplab::parallel;

int main(int argc, char** argv) {
  try {
    std::vector<std::string> engines;
    std::vector<long long> sizes;
    int trials = 1;
    for (int a = 1; a < argc; ++a) {
      const std::string arg = argv[a];
      if (arg == "--trials" && a + 1 < argc) {
        trials = std::max(1, std::atoi(argv[++a]));
      } else if (arg == "--engines" && a + 1 < argc) {
        std::string list = argv[++a];
        for (std::size_t s = 0; s <= list.size();) {
          std::size_t c = std::min(list.find(',', s), list.size());
          if (c > s) engines.push_back(list.substr(s, c - s));
          s = c + 1;
        }
      } else {
        sizes.push_back(std::atoll(argv[a]));
      }
    }
    if (engines.empty()) engines = {"gloo"};
    auto first = init_process_group({.engine = engines[0]});
    const int rank = first->rank(), world = first->size();
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int per_node = local && std::atoi(local) < world ? std::atoi(local) : 0;
    std::vector<std::shared_ptr<ProcessGroup>> groups = {first};
    for (std::size_t k = 1; k < engines.size(); ++k)
      groups.push_back(create_process_group(default_store(), rank, world,
                                            {.engine = engines[k], .ranks_per_node = per_node}));
    for (long long bytes : sizes) {
      Tensor t = Tensor::empty({bytes / 4});  // float32, as in bench_allreduce
      t.fill_(1.0);
      const int iters = static_cast<int>(std::clamp<long long>((256LL << 20) / bytes, 3, 200));
      for (auto& pg : groups)
        for (int i = 0; i < iters; ++i) pg->all_reduce(t);  // warm-up
      std::vector<double> best(groups.size(), 1e300);
      for (int trial = 0; trial < trials; ++trial)
        for (std::size_t k = 0; k < groups.size(); ++k) {
          groups[k]->barrier();
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) groups[k]->all_reduce(t);
          Tensor slowest = Tensor::empty({1});
          slowest.fill_(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
          groups[k]->all_reduce(slowest, ReduceOp::Max);
          best[k] = std::min(best[k], double(slowest.item()));
        }
      if (rank == 0)
        for (std::size_t k = 0; k < groups.size(); ++k) {
          std::string ran = groups[k]->all_reduce_algorithm(bytes);
          if (ran.rfind("auto:", 0) == 0) ran = ran.substr(5);
          std::printf("%s %lld %.9f %s\n", engines[k].c_str(), bytes, best[k], ran.c_str());
        }
      std::fflush(stdout);
    }
    groups.clear();
    first.reset();
    destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_nodes: %s\n", e.what());
    return 1;
  }
  return 0;
}
