// test_nccl.cpp: the nccl engine. Registered only when NCCL is compiled. Without a GPU
// every case that needs one is skipped (doctest::skip), never passed; one case checks that
// asking for nccl on a machine without a GPU fails with a message naming mpi and ring.
// With one GPU the group has world size 1 (NCCL refuses two ranks on one GPU), so these
// cases check the plumbing (unique id through the store, streams, dtypes, Avg, the CPU
// refusal), not a multi-GPU reduction: that needs a machine with two GPUs or two machines.
// Also: a peer that never joins ends in a CommError after the group's timeout (the
// communicator is aborted, not left hanging), two ranks on one GPU are refused naming the
// cuda_ipc ring, and a collective issued right after a long kernel sees its finished output
// (the comm stream waits for the compute stream).
// Read next: parallel/engines/nccl_engine.cpp, test_nccl_rules.cpp (the same rules, no GPU).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>

#include "framework/backend/backend.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/ops/ops.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/hash_store.h"

using namespace dplab;
using namespace dplab::parallel;

namespace {

bool has_gpu() { return cuda_physical_device_count() > 0; }

std::shared_ptr<ProcessGroup> nccl_group() {
  auto store = std::make_shared<HashStore>(Seconds(10.0));
  return create_process_group(store, 0, 1, {.engine = "nccl"});
}

Tensor on_gpu(const std::vector<float>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(Device("cuda:0"));
}

}  // namespace

TEST_CASE("nccl without a GPU: a clear error naming the CPU backends" * doctest::skip(has_gpu())) {
  CHECK_THROWS_WITH_AS(nccl_group(), doctest::Contains("use the mpi or ring engine on CPUs"),
                       Error);
}

TEST_CASE("nccl, world size 1: every collective on CUDA tensors" * doctest::skip(!has_gpu())) {
  auto pg = nccl_group();
  CHECK(pg->transport_name() == "nccl");
  CHECK(pg->transport_name(Device("cuda:0")) == "nccl");  // no dplab transport to look at
  Tensor t = on_gpu({1, 2, 3});
  pg->all_reduce(t, parallel::ReduceOp::Sum);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});
  pg->all_reduce(t, parallel::ReduceOp::Avg);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});
  pg->broadcast(t, 0);
  pg->reduce(t, 0, parallel::ReduceOp::Max);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});
  std::vector<Tensor> outs{on_gpu({0, 0, 0})};
  pg->all_gather(outs, t);
  CHECK(outs[0].to_vector<float>() == std::vector<float>{1, 2, 3});
  Tensor out = on_gpu({0, 0, 0});
  pg->reduce_scatter(out, {t}, parallel::ReduceOp::Sum);
  CHECK(out.to_vector<float>() == std::vector<float>{1, 2, 3});
  std::vector<Tensor> g{on_gpu({0, 0, 0})};
  pg->gather(g, t, 0);
  CHECK(g[0].to_vector<float>() == std::vector<float>{1, 2, 3});
  Tensor s = on_gpu({0, 0, 0});
  pg->scatter(s, {t}, 0);
  CHECK(s.to_vector<float>() == std::vector<float>{1, 2, 3});
  pg->barrier();
  Tensor h = t.to(DType::Float16);
  pg->all_reduce_async(h, parallel::ReduceOp::Sum)->wait();
  CHECK(h.to(DType::Float32).to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(pg->comm_stats().per_collective.at("all_reduce").calls == 3);
}

TEST_CASE("nccl refuses CPU tensors, naming the engines that take them" *
          doctest::skip(!has_gpu())) {
  auto pg = nccl_group();
  Tensor cpu = from_vector(std::vector<float>{1, 2}, {2});
  CHECK_THROWS_WITH_AS(pg->all_reduce(cpu), doctest::Contains("use the mpi or ring engine"), Error);
}

TEST_CASE("nccl: a collective right after a long producer kernel sees its finished output" *
          doctest::skip(!has_gpu())) {
  auto pg = nccl_group();
  const int64_t n = int64_t{64} << 20;
  Tensor x = zeros({n}, {.device = Device("cuda:0")});
  auto* p = static_cast<float*>(x.raw_data());
  for (int i = 0; i < 300; ++i)
    backend_for(Device("cuda:0")).unary(UnaryOp::AddScalar, p, p, n, 1.0f);
  std::vector<Tensor> out = {zeros({n}, {.device = Device("cuda:0")})};
  pg->all_gather(out, x);  // copies x on the comm stream: must wait for the 300 passes
  const std::vector<float> got = out[0].to_vector<float>();
  int64_t bad = 0;
  for (float v : got) bad += v != 300.0f;
  CHECK_MESSAGE(bad == 0, bad << " elements gathered before the producer ended");
}

TEST_CASE("nccl: a peer that never joins ends in a CommError after the timeout, not a hang" *
          doctest::skip(!has_gpu())) {
  // this process is rank 0 of 2 on its machine's only rank slot; rank 1 never comes
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  auto store = std::make_shared<HashStore>(Seconds(10.0));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(
      create_process_group(store, 0, 2, {.engine = "nccl", .timeout = Seconds(2.0)}),
      doctest::Contains("did not finish within 2 s"), Error);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30.0);
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) unsetenv(v);
}

TEST_CASE("nccl: two ranks on one GPU are refused, naming the cuda_ipc ring" *
          doctest::skip(!has_gpu() || cuda_physical_device_count() != 1)) {
  set_virtual_gpus(2);
  auto store = std::make_shared<HashStore>(Seconds(10.0));
  CHECK_THROWS_WITH_AS(create_process_group(store, 1, 2, {.engine = "nccl"}),
                       doctest::Contains("cuda_ipc"), Error);
}
