// test_zero_mpi.cpp: ZeroRedundancyOptimizer on the mpi engine, run by mpirun (meson test
// starts it with 2 and 4 ranks): stages 1 and 2 with SGD and Adam equal one process on the
// concatenated batches and ZeRO over the ring engine in the same job, and the mpi group's
// counters (the engine's model of its traffic) show the bytes of one all-reduce, as the ring's do.
// Read next: tests/zero/test_zero.cpp.
#include "tests/parallel/mpi_test_main.h"

#include "parallel/comm/init.h"
#include "tests/zero/zero_reference.h"

using namespace dplab;
using namespace dplab::parallel;

int main(int argc, char** argv) { return testing::run_under_mpirun(argc, argv); }

using namespace dplab::parallel::testing;

TEST_CASE("ZeRO on mpi equals one process and ZeRO on the ring, stages 1 and 2, SGD and Adam") {
  const int world = get_world_size();
  for (const InnerOptions& o : {kSgd, kAdam}) {
    const Params single = zero_single_process(world, o);
    for (int stage : {1, 2}) {
      CAPTURE(stage);
      mpi_group()->reset_comm_stats();
      ring_group()->reset_comm_stats();
      const Params on_mpi = zero_run(mpi_group(), stage, o, WithDdp::No);
      const Params on_ring = zero_run(ring_group(), stage, o, WithDdp::No);
      CHECK(max_abs_diff(on_mpi, single) <= 1e-5f);
      CHECK(max_abs_diff(on_mpi, on_ring) <= 1e-6f);
      CHECK(mpi_group()->comm_stats().total.bytes_sent ==
            ring_group()->comm_stats().total.bytes_sent);
    }
  }
}

TEST_CASE("ZeRO-2 with DDP on mpi (DDP only buckets, ZeRO reduce-scatters) equals plain DDP") {
  const Params ddp = plain_ddp_run(mpi_group(), kAdam);
  CHECK(max_abs_diff(zero_run(mpi_group(), 2, kAdam, WithDdp::LocalHook), ddp) <= 1e-6f);
}
