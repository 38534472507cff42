// spawn.h: run fn(rank) on N processes from inside one program (torch.multiprocessing.spawn).
// The CUDA runtime does not survive fork() once initialised, so spawn() does not fork a copy
// of the running program: it re-executes it (/proc/self/exe with the same argv) N times with
// DPLAB_SPAWN_RANK etc. set. IMPORTANT: in each child, main() runs again from the top, so
// code before spawn() runs once per rank too, as in Python without an
// `if __name__ == "__main__"` guard. Keep main() before spawn() cheap and side-effect free
// (parse arguments, yes; write files or print banners, guard with is_spawned_child()).
// Read next: spawn.cpp, supervisor.h; tutorials/06_launching.cpp shows both launch styles.
#pragma once
#include <functional>
#include <string>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

struct SpawnOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: the parent picks a free port, so concurrent runs never collide
  bool tee = false;     // prefix the children's output lines with "[rank r] "
  Seconds grace{5.0};   // SIGTERM -> SIGKILL delay when stopping ranks after a failure
};

// In the parent: starts nprocs children and waits for all of them. If any rank fails (an
// exception in fn, a non-zero exit, a signal), the others are stopped and spawn throws
// Error naming that rank and how it ended. In a child: sets RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (so init_process_group() just works), runs
// fn(rank), and ends the process: exit 0, or exit 1 after printing the exception.
//
// Under a launcher (RANK and WORLD_SIZE set by dplab-run or torchrun, which already started
// the ranks) spawn() throws Error instead of starting a second set of jobs: use
// init_process_group() there.
//
// A program may call spawn() more than once; each call is numbered, and a child started by
// call k skips calls before k (they return at once, as if their ranks had finished).
void spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts = {});

// True in a process that spawn() started (DPLAB_SPAWN_RANK is set).
bool is_spawned_child();

}  // namespace dplab::parallel
