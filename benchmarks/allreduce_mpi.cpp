// allreduce_mpi.cpp: the mpi rows of bench_allreduce: all_reduce through dplab's mpi engine
// (a ProcessGroup whose engine calls MPI_Allreduce; OpenMPI's tuned algorithms over its
// shared-memory btl "vader", or over TCP with --mca btl self,tcp) on the same sizes and with
// the same timing rule as the ring and star rows, so the three compare like for like.
// Usage (bench_allreduce launches it): mpirun -np N allreduce_mpi BYTES... [--trials T]
// Rank 0 prints one line per size: "<bytes> <seconds per all-reduce, slowest rank, best of
// T timed loops>" (T = 1 unless given).
// Read next: allreduce.cpp, parallel/engines/mpi_engine.cpp.
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
    auto pg = init_process_group({.engine = "mpi"});
    int trials = 1;
    std::vector<long long> sizes;
    for (int a = 1; a < argc; ++a) {
      if (std::string(argv[a]) == "--trials" && a + 1 < argc)
        trials = std::max(1, std::atoi(argv[++a]));
      else sizes.push_back(std::atoll(argv[a]));
    }
    for (long long bytes : sizes) {
      Tensor t = Tensor::empty({bytes / 4});  // float32, as in bench_allreduce
      t.fill_(1.0);
      // same iteration rule as bench_allreduce: ~256 MiB of payload, 3 to 200 calls
      const int iters = static_cast<int>(std::clamp<long long>((256LL << 20) / bytes, 3, 200));
      for (int i = 0; i < iters; ++i)
        pg->all_reduce(t);  // warm-up: one untimed loop, as bench_allreduce
      double best = 1e300;
      for (int trial = 0; trial < trials; ++trial) {
        pg->barrier();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) pg->all_reduce(t);
        Tensor slowest = Tensor::empty({1});
        slowest.fill_(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      iters);
        pg->all_reduce(slowest, ReduceOp::Max);
        best = std::min(best, double(slowest.item()));
      }
      if (pg->rank() == 0) std::printf("%lld %.9f\n", bytes, best);
    }
    destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_mpi: %s\n", e.what());
    return 1;
  }
  return 0;
}
