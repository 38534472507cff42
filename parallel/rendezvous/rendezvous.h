// rendezvous.h: how the ranks of a job find each other (the half of
// torch.distributed.init_process_group before any group exists). A process learns its rank
// and the world size from the launcher's environment (dplab-run and torchrun:
// RANK/WORLD_SIZE/...; mpirun: OMPI_COMM_WORLD_*; srun: SLURM_*), meets the other ranks
// through a store (env:// and tcp://: rank 0 hosts a TCPStore; file://: a FileStore), and
// checks that everyone agrees on the world size.
// Read next: store.h, tcp_store.h; then comm/init.h, which builds the default group on it.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

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

// Creates the rendezvous store for init_method ("env://", "tcp://host:port",
// "file:///path"): rank 0 serves TCP, the others connect. Exposed for tests and tutorials.
std::shared_ptr<Store> make_store(const std::string& init_method, int rank, int world_size,
                                  Seconds timeout);
// Every rank checks in under its rank and world size; returns when all world_size ranks
// did, throws CommError naming the missing ranks or the disagreement otherwise.
void rendezvous(Store& store, int rank, int world_size, Seconds timeout);

}  // namespace dplab::parallel
