// test_mpi_collectives.cpp: the collective suite on the mpi engine, run by mpirun (meson
// test starts it with 2 and 4 ranks, and once with OpenMPI's TCP transport, so the bytes go
// through sockets as between two machines). Every collective is checked against a serial
// reference (float32, int64, float16; sizes 0, 1, fewer than ranks, odd, several MiB) and
// against the ring engine over shm in the same job, counters included.
// Read next: mpi_test_main.h, parallel/engines/mpi_engine.cpp.
#include "tests/parallel/collective_test_util.h"
#include "tests/parallel/mpi_test_main.h"

#include <algorithm>

#include "framework/tensor/tensor.h"
#include "parallel/comm/init.h"
#include "parallel/comm/process_group.h"
#include "parallel/engines/collective_engine.h"

using namespace dplab;
using namespace dplab::parallel;

int main(int argc, char** argv) { return testing::run_under_mpirun(argc, argv); }

using dplab::parallel::testing::GatherScatterBuffers;
using dplab::parallel::testing::make;
using dplab::parallel::testing::reference;
using dplab::parallel::testing::value;

namespace {

// empty, one element, fewer elements than ranks, odd, and a few MiB (several MPI segments)
const int64_t kSizes[] = {0, 1, 3, 1001, (int64_t{3} << 20) / 4 + 17};

ProcessGroup& mpi() { return default_process_group(); }
// The ring over shm, on the same ranks (mpirun starts them on one host here).
ProcessGroup& ring() {
  static auto pg = create_process_group(default_store(), get_rank(), get_world_size(),
                                        {.engine = "ring", .timeout = Seconds(30.0)});
  return *pg;
}

}  // namespace

TEST_CASE("the default group is the mpi engine, rank and size from mpirun") {
  CHECK(mpi().transport_name() == "mpi");
  // an engine group has no dplab transport: the per-device name is the engine's (this
  // dereferenced a null transport before the engine seam)
  CHECK(mpi().transport_name(Device(DeviceKind::CPU)) == "mpi");
  CHECK(mpi().transport_name(Device("cuda:0")) == "mpi");
  CHECK(mpi().rank() == std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  CHECK(mpi().size() == std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  CHECK(mpi_world().local_size == mpi().size());  // one host
}

TEST_CASE("all_reduce sum/avg/max/min on float32 and sum/max/min on int64 equal the reference and "
          "the ring") {
  const int n = get_world_size(), r = get_rank();
  for (int64_t size : kSizes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      CAPTURE(size);
      CAPTURE(reduce_op_name(op));
      Tensor a = make<float>(r, size), b = make<float>(r, size);
      mpi().all_reduce(a, op);
      ring().all_reduce(b, op);
      CHECK(a.to_vector<float>() == reference<float>(op, n, size));
      CHECK(a.to_vector<float>() == b.to_vector<float>());
      if (op == ReduceOp::Avg) continue;
      Tensor c = make<int64_t>(r, size);
      mpi().all_reduce(c, op);
      CHECK(c.to_vector<int64_t>() == reference<int64_t>(op, n, size));
    }
  }
  Tensor bad = make<int64_t>(r, 4);
  CHECK_THROWS_WITH_AS(mpi().all_reduce(bad, ReduceOp::Avg), doctest::Contains("avg needs float32"),
                       Error);
}

TEST_CASE("all_reduce of float16 (MPI user ops) equals the ring's") {
  const int r = get_rank();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    Tensor a = make<float>(r, 1001).to(DType::Float16), b = make<float>(r, 1001).to(DType::Float16);
    mpi().all_reduce(a, op);
    ring().all_reduce(b, op);
    CHECK(a.to(DType::Float32).to_vector<float>() == b.to(DType::Float32).to_vector<float>());
    CHECK(a.to(DType::Float32).to_vector<float>() == reference<float>(op, get_world_size(), 1001));
  }
}

TEST_CASE("broadcast from every root, reduce to every root") {
  const int n = get_world_size(), r = get_rank();
  for (int root = 0; root < n; ++root)
    for (int64_t size : kSizes) {
      CAPTURE(root);
      CAPTURE(size);
      Tensor t = make<float>(r, size);
      mpi().broadcast(t, root);
      CHECK(t.to_vector<float>() == make<float>(root, size).to_vector<float>());
      Tensor u = make<int64_t>(r, size, 1);
      mpi().reduce(u, root, ReduceOp::Sum);
      if (r == root) CHECK(u.to_vector<int64_t>() == reference<int64_t>(ReduceOp::Sum, n, size, 1));
      else
        CHECK(u.to_vector<int64_t>() ==
              make<int64_t>(r, size, 1).to_vector<int64_t>());  // untouched
    }
}

TEST_CASE("all_gather, gather, scatter, reduce_scatter (int64 and float32)") {
  const int n = get_world_size(), r = get_rank();
  for (int64_t size : {int64_t{0}, int64_t{5}, int64_t{40001}}) {
    CAPTURE(size);
    GatherScatterBuffers buffers(n, r, size);
    auto& [outs, gouts, ins, rs_ins] = buffers;
    mpi().all_gather(outs, make<int64_t>(r, size));
    mpi().gather(gouts, make<int64_t>(r, size), n - 1);
    Tensor piece = Tensor::empty({size}, {.dtype = DType::Int64});
    mpi().scatter(piece, ins, 0);
    Tensor block = Tensor::empty({size});
    mpi().reduce_scatter(block, rs_ins, ReduceOp::Sum);
    Tensor avg = Tensor::empty({size});
    mpi().reduce_scatter(avg, rs_ins, ReduceOp::Avg);
    for (int i = 0; i < n; ++i) {
      CHECK(outs[i].to_vector<int64_t>() == make<int64_t>(i, size).to_vector<int64_t>());
      if (r == n - 1)
        CHECK(gouts[i].to_vector<int64_t>() == make<int64_t>(i, size).to_vector<int64_t>());
    }
    CHECK(piece.to_vector<int64_t>() == make<int64_t>(100 + r, size).to_vector<int64_t>());
    CHECK(block.to_vector<float>() == reference<float>(ReduceOp::Sum, n, size, r));
    CHECK(avg.to_vector<float>() == reference<float>(ReduceOp::Avg, n, size, r));
    CHECK(rs_ins[0].to_vector<float>() ==
          make<float>(r, size, 0).to_vector<float>());  // inputs kept
  }
}

TEST_CASE("send/recv around the ring of ranks; a short recv is an error, not garbage") {
  const int n = get_world_size(), r = get_rank();
  Tensor mine = make<float>(r, 70001), theirs = Tensor::empty({70001});
  if (r % 2 == 0) {  // even ranks send first, so the pattern cannot deadlock
    mpi().send(mine, (r + 1) % n);
    mpi().recv(theirs, (r + n - 1) % n);
  } else {
    mpi().recv(theirs, (r + n - 1) % n);
    mpi().send(mine, (r + 1) % n);
  }
  CHECK(theirs.to_vector<float>() == make<float>((r + n - 1) % n, 70001).to_vector<float>());
  mpi().barrier();
  // rank 0 sends 3 floats to rank 1, which expects 5: the sizes disagree, and it says so
  auto pg = create_process_group(default_store(), r, n, {.engine = "mpi"});
  if (r == 0) pg->send(make<float>(0, 3), 1);
  if (r == 1) {
    Tensor five = Tensor::empty({5});
    CHECK_THROWS_WITH_AS(pg->recv(five, 0), doctest::Contains("got 12 bytes, expected 20"),
                         CommError);
    CHECK_THROWS_WITH_AS(pg->barrier(), doctest::Contains("failed earlier"), CommError);
  }
}

TEST_CASE("async handles complete in call order; a blocking call waits for them") {
  const int n = get_world_size(), r = get_rank();
  Tensor x = make<float>(r, 50000), y = make<float>(r, 777, 2);
  WorkPtr wx = mpi().all_reduce_async(x, ReduceOp::Sum);
  WorkPtr wy = mpi().all_reduce_async(y, ReduceOp::Max);
  WorkPtr wb = mpi().barrier_async();
  wb->wait();
  CHECK(wx->is_completed());
  CHECK(wy->is_completed());
  CHECK(x.to_vector<float>() == reference<float>(ReduceOp::Sum, n, 50000));
  CHECK(y.to_vector<float>() == reference<float>(ReduceOp::Max, n, 777, 2));
  Tensor z = make<float>(r, 10);
  WorkPtr wz = mpi().all_reduce_async(z);
  mpi().barrier();  // drains the queue first: every rank sees one order
  CHECK(wz->is_completed());
}

TEST_CASE("counters on mpi report the textbook bytes: the ring's, exactly") {
  const int n = get_world_size(), r = get_rank();
  for (int64_t elems : {int64_t{12000}, int64_t{12001}, int64_t{5}, int64_t{2}}) {
    CAPTURE(elems);
    Tensor a = make<float>(r, elems), b = make<float>(r, elems);
    mpi().reset_comm_stats();
    ring().reset_comm_stats();
    mpi().all_reduce(a);
    ring().all_reduce(b, ReduceOp::Sum, Algorithm::Ring);
    mpi().broadcast(a, 1 % n);
    ring().broadcast(b, 1 % n);
    std::vector<Tensor> oa(n, Tensor()), ob(n, Tensor());
    for (int i = 0; i < n; ++i) {
      oa[i] = Tensor::empty({elems});
      ob[i] = Tensor::empty({elems});
    }
    mpi().all_gather(oa, a);
    ring().all_gather(ob, b);
    const CommStats sm = mpi().comm_stats(), sr = ring().comm_stats();
    for (const char* c : {"all_reduce", "broadcast", "all_gather"}) {
      CAPTURE(c);
      CHECK(sm.per_collective.at(c).calls == 1);
      CHECK(sm.per_collective.at(c).bytes_sent == sr.per_collective.at(c).bytes_sent);
      CHECK(sm.per_collective.at(c).bytes_received == sr.per_collective.at(c).bytes_received);
    }
    if (elems % n == 0)
      CHECK(sm.per_collective.at("all_reduce").bytes_sent == 2 * (n - 1) * elems * 4 / n);
  }
}

TEST_CASE("more groups on mpi: each its own communicator; ranks must be mpirun's") {
  const int n = get_world_size(), r = get_rank();
  auto second = create_process_group(default_store(), r, n, {.engine = "mpi"});
  Tensor a = make<float>(r, 100), b = make<float>(r, 100, 1);
  REQUIRE(mpi_world().thread_multiple);     // MPI_THREAD_MULTIPLE: two threads in MPI at once
  WorkPtr w = second->all_reduce_async(b);  // on the second group's worker thread ...
  mpi().all_reduce(a);                      // ... while this thread uses the first group
  w->wait();
  CHECK(a.to_vector<float>() == reference<float>(ReduceOp::Sum, n, 100));
  CHECK(b.to_vector<float>() == reference<float>(ReduceOp::Sum, n, 100, 1));
  CHECK_THROWS_WITH_AS(create_process_group(default_store(), (r + 1) % n, n, {.engine = "mpi"}),
                       doctest::Contains("takes ranks from mpirun"), Error);
}
