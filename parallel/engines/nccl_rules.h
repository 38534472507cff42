// nccl_rules.h: the nccl engine's decisions that need no GPU, so they are tested on any
// machine (tests/parallel/test_nccl_rules.cpp) and nccl_engine.cpp only calls them:
//  - which GPU a rank uses: its LOCAL rank (the global rank is wrong on the second machine),
//    and a refusal when a machine has more ranks than GPUs (NCCL cannot put two ranks on one
//    GPU; dplab's cuda_ipc ring can);
//  - how a rank waits for NCCL: polling the stream and ncclCommGetAsyncError until done, a
//    failure, or the group's timeout; the last two abort the communicator (ncclCommAbort) so
//    peers stop too, and throw CommError naming the collective and the rank.
// Read next: nccl_engine.cpp.
#pragma once
#include <functional>
#include <string>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

struct NcclPlacement {
  int rank = 0;
  int world_size = 1;
  bool launcher_env = false;  // a launcher told us local_rank / local_world_size
  int local_rank = 0;         // used only when launcher_env
  int local_world_size = 1;   // used only when launcher_env
  int physical_gpus = 0;
  int logical_devices = 0;  // > physical_gpus when DPLAB_VIRTUAL_GPUS shares GPUs
};

// The logical device cuda:<local rank> this rank's communicator uses, or an Error saying why
// there is none: no GPU, more ranks on this machine than GPUs (with the cuda_ipc ring as the
// way to share a GPU), a local rank that names no GPU.
int nccl_device_for(const NcclPlacement& p);

enum class NcclPoll { Done, Pending, Failed };

// Calls poll(why) until it returns Done. When it returns Failed (having set why), or when
// `timeout` has passed, calls abort() once and throws CommError:
//   "rank 1: all_reduce on the nccl engine failed: <why>; the communicator was aborted"
//   "rank 1: all_reduce on the nccl engine did not finish within 30 s (a peer that never
//    joined, or died); the communicator was aborted"
// Polls back-to-back at first, then sleeps up to 1 ms between polls (ranks may share cores).
void nccl_wait_or_abort(const std::function<NcclPoll(std::string& why)>& poll,
                        const std::function<void()>& abort, Seconds timeout, int rank,
                        const std::string& collective);

}  // namespace dplab::parallel
