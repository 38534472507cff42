// test_nccl.cpp: the nccl backend. Registered only when NCCL is compiled. Without a GPU
// every case that needs one is skipped (doctest::skip), never passed; one case checks that
// asking for nccl on a machine without a GPU fails with a message naming mpi and ring.
// With one GPU the group has world size 1 (NCCL refuses two ranks on one GPU), so these
// cases check the plumbing (unique id through the store, streams, dtypes, Avg, the CPU
// refusal), not a multi-GPU reduction: that needs a machine with two GPUs or two machines.
// Read next: parallel/engines/nccl_engine.cpp.
#include <doctest/doctest.h>

#include "framework/backend/cuda/cuda_backend.h"
#include "framework/ops/ops.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/comm/process_group.h"

using namespace dplab;
using namespace dplab::parallel;

namespace {

bool has_gpu() { return cuda_physical_device_count() > 0; }

std::shared_ptr<ProcessGroup> nccl_group() {
  auto store = std::make_shared<HashStore>(Seconds(10.0));
  return create_process_group(store, 0, 1, {.backend = "nccl"});
}

Tensor on_gpu(const std::vector<float>& v) { return from_vector(v, {static_cast<int64_t>(v.size())}).to(Device("cuda:0")); }

}  // namespace

TEST_CASE("nccl without a GPU: a clear error naming the CPU backends" * doctest::skip(has_gpu())) {
  CHECK_THROWS_WITH_AS(nccl_group(), doctest::Contains("use the mpi or ring backend on CPUs"), Error);
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

TEST_CASE("nccl refuses CPU tensors, naming the backends that take them" * doctest::skip(!has_gpu())) {
  auto pg = nccl_group();
  Tensor cpu = from_vector(std::vector<float>{1, 2}, {2});
  CHECK_THROWS_WITH_AS(pg->all_reduce(cpu), doctest::Contains("use the mpi or ring backend"), Error);
}
