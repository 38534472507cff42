// supervisor.h: start N rank processes and watch them, the engine under dplab-run and spawn().
// Each rank is fork + execve'd into its own process group (so stopping a rank also stops any
// processes it started). The supervisor forwards SIGINT/SIGTERM to every rank, optionally
// prefixes each output line with "[rank r] ", and when one rank fails it stops the others:
// SIGTERM, then SIGKILL after a grace period. Failure = non-zero exit status or a signal.
// A second SIGINT/SIGTERM/SIGHUP during the grace period ends it: SIGKILL at once (as a second
// Ctrl-C does to torchrun), for the user who will not wait for ranks that ignore the first.
// Ranks do not get the terminal's Ctrl-C directly (their own process groups): the
// supervisor forwards it. If the supervisor itself dies (kill -9, OOM killer), each rank
// gets SIGTERM from the kernel (the parent-death signal), so no rank outlives its launcher. A rank that reads the terminal's stdin would be stopped (SIGTTIN).
// Read next: supervisor.cpp; spawn.h and exe/dplab_run.cpp use it.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

struct RankProcess {
  std::vector<std::string> argv;           // argv[0] is the program (searched in PATH)
  std::map<std::string, std::string> env;  // added to (or replacing in) the parent's env
};

struct SuperviseOptions {
  bool tee = false;    // prefix each line of stdout/stderr with "[rank r] "
  Seconds grace{5.0};  // between SIGTERM and SIGKILL when stopping the other ranks
  bool forward_signals = true;
  // The job's rank of the first process (node_rank * nproc_per_node): failures and tee'd
  // lines name job ranks, so a launcher on node 1 says "rank 2", not "rank 0".
  int first_rank = 0;
  // Across nodes (node_watch.h): polled every pass; a failure on another node stops this
  // node's ranks and ends in SuperviseResult::remote_failure.
  std::function<std::optional<std::string>()> remote_failure = nullptr;
  // Called with SuperviseResult::failure when a rank here fails, before the others stop.
  std::function<void(const std::string&)> on_failure = nullptr;
  // Called when a signal has been forwarded and the grace period begins (dplab-run says so,
  // and that a second signal kills at once).
  std::function<void(int signal)> on_interrupt = nullptr;
};

struct RankOutcome {
  int pid = -1;
  int wait_status = 0;         // as from waitpid
  bool stopped_by_us = false;  // killed because another rank failed (or on a forwarded signal)
};

struct SuperviseResult {
  std::vector<RankOutcome> ranks;
  int failed_rank = -1;    // index (in procs) of the first rank that failed on its own, -1 if none
  std::string failure;     // "rank 1 (pid 123) exited with status 3"; empty if all ok
  int interrupted_by = 0;  // a forwarded SIGINT/SIGTERM, 0 if none
  int started = 0;         // ranks started: fewer than asked when a signal cut the start-up short
  std::string remote_failure;  // another node's failure that stopped ours; empty if none
  bool killed_at_once = false;  // a second signal cut the grace period short: SIGKILL at once
  bool ok() const { return failed_rank < 0 && interrupted_by == 0 && remote_failure.empty(); }
};

// Starts every process, waits for all of them, returns how each ended. Throws Error only if
// a process cannot be started at all (the ones already started are stopped first). A
// forwarded signal that arrives during the start-up ends it at once: the rest never start.
SuperviseResult supervise(const std::vector<RankProcess>& procs, const SuperviseOptions& opts = {});

// The rendezvous variables of torchrun for rank r of n on one node, plus one thread per rank
// for OpenMP and dplab unless the caller's environment already says otherwise.
std::map<std::string, std::string> rank_env(int rank, int nprocs, const std::string& master_addr,
                                            int master_port);

// Where a launcher's ranks sit in a job of several nodes (dplab-run --nnodes M --node-rank R).
struct NodePlacement {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
};
// torchrun's variables for the local_rank-th process of this node: RANK = node_rank *
// nproc_per_node + local_rank, WORLD_SIZE = nnodes * nproc_per_node, LOCAL_RANK,
// LOCAL_WORLD_SIZE = nproc_per_node, GROUP_RANK = NODE_RANK = node_rank, GROUP_WORLD_SIZE =
// nnodes, MASTER_ADDR/MASTER_PORT (rank 0's store, on node 0).
std::map<std::string, std::string> rank_env(int local_rank, const NodePlacement& where,
                                            const std::string& master_addr, int master_port);

// For a child between fork() and exec(): the kernel sends it SIGTERM when `parent` (the
// process that forked it) dies; if the parent is already gone, the child exits at once.
// Async-signal-safe. Used for ranks and for dplab-compare's worker.
void die_with_parent(pid_t parent);

// The most ranks a launcher starts on one node unless told more (--nproc-limit): each rank is
// a process with its own memory and threads, so more is far more likely a typo (2000 for 2)
// than a plan. dplab-run and dplab-compare share it.
constexpr int kDefaultNprocLimit = 256;
// Empty when `n` processes fit under `limit`; else the refusal both programs print, `asked`
// being what the user gave: "--ns 1000 is over the limit of 256 ranks per node (each rank is
// a process of its own); if you mean it, add --nproc-limit 1000".
std::string nproc_over_limit(const std::string& asked, int64_t n, int limit);

// "exited with status 3", "was killed by signal 9 (Killed)".
std::string describe_wait_status(int wait_status);

}  // namespace dplab::parallel
