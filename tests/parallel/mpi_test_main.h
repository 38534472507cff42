// mpi_test_main.h: the main() of doctest suites that run under mpirun, one process per rank.
// Every rank runs every test case in the same order (so collectives match up); only rank 0
// prints doctest's summary, the others print only their failures (doctest's --minimal), so
// a test's output holds one "test cases: ..." line to count. Exits 77 (Meson's SKIP) when
// dplab was built without MPI or the program was not started by mpirun.
// Read next: test_mpi_collectives.cpp, tests/ddp/test_ddp_mpi.cpp.
#pragma once
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "parallel/comm/init.h"
#include "parallel/engines/collective_engine.h"

namespace dplab::parallel::testing {

constexpr int kSkipped = 77;

// The job's mpi group (init_process_group's, made by run_under_mpirun), and a ring group
// over the same ranks and store, for suites that compare the two engines in one job.
inline std::shared_ptr<ProcessGroup> mpi_group() { return default_process_group_handle(); }
inline std::shared_ptr<ProcessGroup> ring_group() {
  static auto pg = create_process_group(default_store(), get_rank(), get_world_size(),
                                        {.engine = "ring", .timeout = Seconds(30.0)});
  return pg;
}

inline int run_under_mpirun(int argc, char** argv) {
  if (!mpi_built()) {
    std::printf("skipped: dplab was built without MPI\n");
    return kSkipped;
  }
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) {
    std::printf("skipped: start this test with mpirun -np N (meson test does)\n");
    return kSkipped;
  }
  int failed = 1;
  try {
    init_process_group({.engine = "mpi", .timeout = Seconds(30.0)});
    doctest::Context ctx(argc, argv);
    // mpirun gives each rank a pty, so doctest would colour its summary line; counters
    // (scripts/setup.sh) read that line as plain text
    ctx.setOption("no-colors", true);
    if (get_rank() != 0) ctx.setOption("minimal", true);
    failed = ctx.run() != 0 ? 1 : 0;
    destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("OMPI_COMM_WORLD_RANK"), e.what());
    return 1;
  }
  return failed;
}

}  // namespace dplab::parallel::testing
