// test_nccl_rules.cpp: the nccl engine's decisions that need no GPU (nccl_rules.h), on every
// machine: which GPU a rank takes (its local rank), the refusal of several ranks per GPU
// naming the cuda_ipc ring, and the wait that aborts the communicator on an error or after
// the group's timeout instead of hanging, naming the collective and the rank.
// Read next: parallel/engines/nccl_rules.h, test_nccl.cpp (the GPU half).
#include <doctest/doctest.h>

#include "framework/error.h"
#include "parallel/engines/nccl_rules.h"

using namespace dplab;
using namespace dplab::parallel;

TEST_CASE("nccl device: the local rank, not the global one") {
  // two machines of 4 GPUs, launched by dplab-run: global rank 6 is local rank 2
  NcclPlacement p{.rank = 6,
                  .world_size = 8,
                  .launcher_env = true,
                  .local_rank = 2,
                  .local_world_size = 4,
                  .physical_gpus = 4,
                  .logical_devices = 4};
  CHECK(nccl_device_for(p) == 2);
  // ranks made in one program, no launcher: all on this machine
  CHECK(nccl_device_for({.rank = 1, .world_size = 2, .physical_gpus = 2, .logical_devices = 2}) ==
        1);
}

TEST_CASE("nccl device: several ranks per GPU are refused, naming the cuda_ipc ring") {
  // DPLAB_VIRTUAL_GPUS=4 on one GPU, 4 ranks on this machine
  NcclPlacement p{.rank = 1,
                  .world_size = 4,
                  .launcher_env = true,
                  .local_rank = 1,
                  .local_world_size = 4,
                  .physical_gpus = 1,
                  .logical_devices = 4};
  CHECK_THROWS_WITH_AS(nccl_device_for(p), doctest::Contains("cuda_ipc"), Error);
  CHECK_THROWS_WITH_AS(nccl_device_for(p), doctest::Contains("DPLAB_VIRTUAL_GPUS"), Error);
  CHECK_THROWS_WITH_AS(nccl_device_for(p), doctest::Contains("4 ranks on 1 GPU(s)"), Error);
  // rank 0 refuses too (it would otherwise wait in ncclCommInitRank for the others)
  p.rank = p.local_rank = 0;
  CHECK_THROWS_WITH_AS(nccl_device_for(p), doctest::Contains("ring engine"), Error);
  // several machines without LOCAL_RANK: the world would be taken for this machine's ranks
  CHECK_THROWS_WITH_AS(
      nccl_device_for({.rank = 5, .world_size = 8, .physical_gpus = 4, .logical_devices = 4}),
      doctest::Contains("LOCAL_RANK"), Error);
  CHECK_THROWS_WITH_AS(nccl_device_for({.rank = 0, .world_size = 1}),
                       doctest::Contains("use the mpi or ring engine on CPUs"), Error);
}

TEST_CASE("nccl wait: done after some polls returns without aborting") {
  int polls = 0, aborts = 0;
  nccl_wait_or_abort(
      [&](std::string&) { return ++polls < 100 ? NcclPoll::Pending : NcclPoll::Done; },
      [&] { ++aborts; }, Seconds(60.0), 0, "all_reduce");
  CHECK(polls == 100);
  CHECK(aborts == 0);
}

TEST_CASE("nccl wait: an async error aborts once and names the collective, rank and error") {
  int polls = 0, aborts = 0;
  auto poll = [&](std::string& why) {
    if (++polls < 5) return NcclPoll::Pending;
    why = "remote process exited or there was a network error";
    return NcclPoll::Failed;
  };
  CHECK_THROWS_WITH_AS(nccl_wait_or_abort(
                           poll, [&] { ++aborts; }, Seconds(60.0), 3, "broadcast"),
                       "rank 3: broadcast on the nccl engine failed: remote process exited or "
                       "there was a network error; the communicator was aborted",
                       CommError);
  CHECK(aborts == 1);
  CHECK(polls == 5);
}

TEST_CASE("nccl wait: a collective that never ends is aborted after the timeout") {
  int aborts = 0;
  CHECK_THROWS_WITH_AS(
      nccl_wait_or_abort([](std::string&) { return NcclPoll::Pending; }, [&] { ++aborts; },
                         Seconds(0.05), 1, "all_reduce"),
      doctest::Contains("rank 1: all_reduce on the nccl engine did not finish within 0.05 s"),
      CommError);
  CHECK(aborts == 1);
}
