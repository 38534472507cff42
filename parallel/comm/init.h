// init.h: init_process_group and friends (torch.distributed.init_process_group).
// A process learns its rank and the world size from the launcher's environment (dplab-run
// and torchrun: RANK/WORLD_SIZE/...; mpirun: OMPI_COMM_WORLD_*; srun: SLURM_*), meets the
// other ranks through a store (env:// and tcp://: rank 0 hosts a TCPStore; file://: a
// FileStore), checks that everyone agrees on the world size, and builds the default group.
// Read next: store.h, tcp_store.h, process_group.h; launch/spawn.h for starting ranks.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "parallel/comm/process_group.h"
#include "parallel/comm/store.h"

namespace dplab::parallel {

struct InitOptions {
  // "ring" or "star" (one node, shared memory); "mpi" (CPUs, any number of nodes, needs
  // mpirun: rank and world size then come from MPI) or "nccl" (GPUs, any number of nodes)
  std::string backend = "ring";
  std::string init_method = "env://";  // or "file:///path", "tcp://host:port"
  int rank = -1;                       // -1: from the environment
  int world_size = -1;                 // -1: from the environment
  // Rendezvous and every later collective wait. Left at the default (60 s), the
  // environment variable DPLAB_TIMEOUT (seconds) replaces it; a value set here wins.
  Seconds timeout = kDefaultTimeout;
  double link_gbps = 0;                // > 0: emulate a link per rank (transport/link_model.h)
};

// Builds the default process group; every rank must call it. Throws CommError naming the
// ranks that did not check in within the timeout, or the ranks that disagree on world size.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opts = {});
ProcessGroup& default_process_group();  // throws if init_process_group has not run
// The rendezvous store behind the default group, for exchanging small facts (strings)
// between ranks; keys starting with "rdzv/" and "exit/" are used by init itself.
std::shared_ptr<Store> default_store();
bool is_initialized();
// Waits (up to the timeout) until every rank has called it too (an exit barrier, so no rank
// leaves while a peer is still in the last collective with it), then drops the default
// group; rank 0 closes the store last. Call it on every rank, like init_process_group.
void destroy_process_group();
int get_rank();
int get_world_size();

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// Reads, in order of preference: torchrun/dplab-run variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), else OpenMPI (OMPI_COMM_WORLD_RANK/SIZE/
// LOCAL_RANK/LOCAL_SIZE), else Slurm (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID and
// SLURM_TASKS_PER_NODE). MASTER_ADDR/MASTER_PORT default to 127.0.0.1:29500 (torch's
// default) when unset; LOCAL_RANK/LOCAL_WORLD_SIZE default to a single node.
// Throws Error when no launcher variables exist, or a value is missing or malformed
// ("RANK='x' is not an integer", "RANK=4 is not below WORLD_SIZE=4").
RankInfo rank_info_from_env();
// The same over an explicit environment, for tests.
RankInfo rank_info_from_env(const std::map<std::string, std::string>& env);

// The timeout init_process_group uses: `given`, or DPLAB_TIMEOUT's seconds when `given` is
// the default and the variable is set. Throws Error on a malformed DPLAB_TIMEOUT.
Seconds resolve_timeout(Seconds given);

// Creates the rendezvous store for init_method ("env://", "tcp://host:port",
// "file:///path"): rank 0 serves TCP, the others connect. Exposed for tests and tutorials.
std::shared_ptr<Store> make_store(const std::string& init_method, int rank, int world_size,
                                  Seconds timeout);
// Every rank checks in under its rank and world size; returns when all world_size ranks
// did, throws CommError naming the missing ranks or the disagreement otherwise.
void rendezvous(Store& store, int rank, int world_size, Seconds timeout);

}  // namespace dplab::parallel
