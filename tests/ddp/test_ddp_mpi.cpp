// test_ddp_mpi.cpp: DistributedDataParallel on the mpi engine, run by mpirun (meson test
// starts it with 2 and 4 ranks). DDP itself is unchanged: the same ToyModel, batches and SGD
// steps as tests/ddp/test_ddp.cpp must give the parameters of one process trained on the
// concatenated batches, and the same parameters as DDP over the ring engine in this job;
// also with fp16 gradient compression (float16 sums through MPI user ops) and no_sync.
// SyncBatchNorm and distributed_concat (distributed evaluation) equal the ring's too; the
// sharded parameter server on mpi trains like one process and moves the formulas' bytes.
// Read next: tests/parallel/mpi_test_main.h, tests/ddp/test_ddp.cpp.
#include "tests/parallel/mpi_test_main.h"

#include <algorithm>
#include <cmath>

#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/algorithms/cost.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/compression.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp/sync_batch_norm.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "parallel/ps/parameter_server.h"
#include "tests/ddp/ddp_reference.h"

using namespace dplab;
using namespace dplab::parallel;

int main(int argc, char** argv) { return testing::run_under_mpirun(argc, argv); }

using namespace dplab::parallel::testing;

namespace {

void check_close(const Params& a, const Params& b, double eps) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    REQUIRE(a[k].size() == b[k].size());
    for (size_t i = 0; i < a[k].size(); ++i)
      CHECK(a[k][i] == doctest::Approx(b[k][i]).epsilon(eps));
  }
}

}  // namespace

TEST_CASE("DDP on mpi equals one process on the concatenated batches, and DDP on the ring") {
  const int world = get_world_size();
  const Params expected = single_process(world, 1);
  const Params on_mpi = ddp_train(mpi_group(), 1, false);
  check_close(on_mpi, expected, 1e-5);  // the tolerance of tests/ddp/test_ddp.cpp
  check_close(on_mpi, ddp_train(ring_group(), 1, false), 1e-6);
  // a small bucket cap: several buckets, each one all_reduce on the mpi group
  CHECK(default_process_group().comm_stats().per_collective.at("all_reduce").calls >= 2 * kSteps);
}

TEST_CASE("DDP on mpi with no_sync accumulation equals accumulation in one process") {
  check_close(ddp_train(mpi_group(), 2, false), single_process(get_world_size(), 2), 1e-5);
}

TEST_CASE("DDP on mpi with fp16 compression: as close to fp32 as on the ring, the ring's bytes") {
  auto max_diff = [](const Params& a, const Params& b) {
    float d = 0;
    for (size_t k = 0; k < a.size(); ++k)
      for (size_t i = 0; i < a[k].size(); ++i) d = std::max(d, std::abs(a[k][i] - b[k][i]));
    return d;
  };
  auto all_reduce_bytes = [](ProcessGroup& pg) {
    return pg.comm_stats().per_collective.at("all_reduce").bytes_sent;
  };
  const Params expected = single_process(get_world_size(), 1);
  default_process_group().reset_comm_stats();
  ring_group()->reset_comm_stats();
  const Params on_mpi = ddp_train(mpi_group(), 1, true);
  const Params on_ring = ddp_train(ring_group(), 1, true);
  // 3 steps on gradients rounded to ~5e-4 relative (the bound of tests/ddp_extensions)
  CHECK(max_diff(on_mpi, expected) < 2e-3f);
  CHECK(max_diff(on_mpi, on_ring) < 2e-3f);
  CHECK(max_diff(on_mpi, expected) > 0.0f);  // it did go through half precision
  CHECK(all_reduce_bytes(default_process_group()) == all_reduce_bytes(*ring_group()));
}

TEST_CASE("SyncBatchNorm and distributed_concat on mpi equal them on the ring") {
  const int r = get_rank(), world = get_world_size();
  // rank r holds 2 + r rows: unequal slices; channel statistics come from every rank's rows
  auto sync_bn = [&](std::shared_ptr<ProcessGroup> pg) {
    Generator g(300 + r);
    Tensor x = add_scalar(randn({2 + r, 3}, {}, &g), 2.0f).requires_grad_();
    Tensor mean = zeros({3}), var = ones({3});
    Tensor w = from_vector(std::vector<float>{0.5f, 1.5f, -2.0f}, {3}).requires_grad_();
    Tensor b = zeros({3}).requires_grad_();
    Tensor y = sync_batch_norm(x, mean, var, w, b, 0.3f, 1e-5f, *pg);
    sum(mul(y, randn({2 + r, 3}, {}, &g))).backward();  // sum(y*y) would have a zero gradient
    return Params{y.to_vector<float>(), x.grad().to_vector<float>(), w.grad().to_vector<float>(),
                  mean.to_vector<float>(), var.to_vector<float>()};
  };
  const Params on_mpi = sync_bn(mpi_group()), on_ring = sync_bn(ring_group());
  for (size_t k = 0; k < on_mpi.size(); ++k)  // sums in another order: ~1e-7 apart
    for (size_t i = 0; i < on_mpi[k].size(); ++i)
      CHECK(on_mpi[k][i] == doctest::Approx(on_ring[k][i]).epsilon(1e-5).scale(1.0));
  // 11 predictions over `world` ranks, in the sampler's order, concatenated back
  const int64_t total = 11, per = (total + world - 1) / world;
  Tensor mine = full({per, 2}, static_cast<double>(r));
  CHECK(distributed_concat(*mpi_group(), mine, total).to_vector<float>() ==
        distributed_concat(*ring_group(), mine, total).to_vector<float>());
}

// The sharded parameter server on the mpi engine (mpi_engine.cpp's ps_half: ps.cpp's schedule
// with MPI_Isend / MPI_Irecv): S = 1 (the star), S = N co-located (the ring's bytes) and one
// separate server train like one process on the workers' batches, and every rank's counted
// bytes are cost.h's formulas.
TEST_CASE("ParameterServer on mpi equals one process; its bytes are the formulas") {
  const int n = get_world_size();
  struct Case {
    int servers;
    bool colocated;
  };
  for (const Case c : {Case{1, true}, Case{n, true}, Case{1, false}}) {
    CAPTURE(c.servers);
    CAPTURE(c.colocated);
    auto pg = mpi_group();
    const int r = pg->rank();
    const Params expected = single_process(c.colocated ? n : n - c.servers);  // seed 0, as rank 0
    manual_seed(r == 0 ? 0 : 1000 + r);  // the construction's broadcast makes them equal
    auto model = std::make_shared<models::ToyModel>();
    pg->reset_comm_stats();
    ParameterServer ps(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9},
                       {.servers = c.servers, .colocated = c.colocated, .process_group = pg});
    for (int s = 0; s < kSteps; ++s) {
      if (ps.is_worker()) {
        ps.zero_grad();
        const int w = ps.workers(), i = ps.worker_index();
        mse_loss(model->forward(rows_of(batch_x(s, w), i)), rows_of(batch_y(s, w), i)).backward();
      }
      ps.step();
    }
    if (ps.is_worker()) check_close(params_of(*model), expected, 1e-5);
    const auto stats = pg->comm_stats().per_collective;
    const Traffic push = ps_push_cost(ps.plan(), 4, r, n), pull = ps_pull_cost(ps.plan(), 4, r, n);
    CHECK(stats.at("ps_push").bytes_sent == kSteps * push.sent);
    CHECK(stats.at("ps_push").bytes_received == kSteps * push.received);
    CHECK(stats.at("ps_pull").bytes_sent == kSteps * pull.sent);
    CHECK(stats.at("ps_pull").bytes_received == kSteps * pull.received);
  }
}
