// nccl_rules.cpp: see nccl_rules.h. Plain C++: no CUDA, no NCCL header.
// Read next: nccl_engine.cpp.
#include "parallel/engines/nccl_rules.h"

#include <chrono>
#include <thread>

#include "framework/error.h"

namespace dplab::parallel {

int nccl_device_for(const NcclPlacement& p) {
  DPLAB_CHECK(p.physical_gpus > 0, "the nccl engine needs a GPU and this machine has none (use "
                                   "the mpi or ring engine on CPUs)");
  // Without a launcher's word, the ranks are taken to be all on this machine.
  const int local_rank = p.launcher_env ? p.local_rank : p.rank;
  const int local_size = p.launcher_env ? p.local_world_size : p.world_size;
  const std::string shared =
      p.logical_devices > p.physical_gpus
          ? fmt::format(" (DPLAB_VIRTUAL_GPUS gives {} logical devices on {} GPU(s), but NCCL "
                        "sees physical GPUs)",
                        p.logical_devices, p.physical_gpus)
          : "";
  DPLAB_CHECK(local_size <= p.physical_gpus,
              "rank {}: the nccl engine needs one GPU per rank, and this machine runs {} ranks "
              "on {} GPU(s){}: NCCL refuses two ranks on one GPU (\"duplicate GPU\" in "
              "ncclCommInitRank). To run several ranks per GPU, use the ring engine: its "
              "cuda_ipc transport shares a GPU between ranks. On several machines, set "
              "LOCAL_RANK and LOCAL_WORLD_SIZE (dplab-run and torchrun do)",
              p.rank, local_size, p.physical_gpus, shared);
  DPLAB_CHECK(local_rank >= 0 && local_rank < local_size,
              "rank {}: local rank {} is not in [0, {}) (LOCAL_RANK / LOCAL_WORLD_SIZE)", p.rank,
              local_rank, local_size);
  return local_rank;
}

void nccl_wait_or_abort(const std::function<NcclPoll(std::string& why)>& poll,
                        const std::function<void()>& abort, Seconds timeout, int rank,
                        const std::string& collective) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    std::string why;
    const NcclPoll state = poll(why);
    if (state == NcclPoll::Done) return;
    if (state == NcclPoll::Failed) {
      abort();
      throw CommError(fmt::format("rank {}: {} on the nccl engine failed: {}; the communicator "
                                  "was aborted",
                                  rank, collective, why));
    }
    if (std::chrono::steady_clock::now() - start > timeout) {
      abort();
      throw CommError(fmt::format("rank {}: {} on the nccl engine did not finish within {} s "
                                  "(a peer that never joined, or died); the communicator was "
                                  "aborted",
                                  rank, collective, timeout.count()));
    }
    // back-to-back for the first polls (a collective often ends within microseconds), then
    // sleep, growing to 1 ms, so a waiting rank leaves its core to the others
    if (polls >= 64) {
      pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
      std::this_thread::sleep_for(pause);
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace dplab::parallel
