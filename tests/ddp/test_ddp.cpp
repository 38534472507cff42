// DistributedDataParallel: equals single-process training on the concatenated batches,
// no_sync equals accumulation, bucket sizes do not change results, one all-reduce per
// bucket, unused parameters, and a failing rank. Ranks are threads (fast) and, once,
// forked processes over shared memory.
#include <doctest/doctest.h>

#include <cmath>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/parallel/rank_harness.h"

using dplab::parallel::testing::borrow;

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_processes;
using dplab::parallel::testing::run_threads;

using namespace dplab::parallel::testing;

namespace {

// The reference's initial weights (seed 0), made once, outside the rank threads: the
// default generator is shared by every thread, so seeding it per rank would race.
const StateDict& initial_weights() {
  static StateDict sd = [] {
    manual_seed(0);
    return models::ToyModel().state_dict();
  }();
  return sd;
}

// DDP: rank 0 starts from the reference's weights, the others from whatever their
// (different) draws gave: the broadcast at construction must make them identical.
std::vector<std::vector<float>> ddp_run(ProcessGroup& pg, DDPOptions opts, int accumulate = 1,
                                        std::vector<int64_t>* calls_per_step = nullptr) {
  int r = pg.rank(), world = pg.size();
  const StateDict& init = initial_weights();
  auto model = std::make_shared<models::ToyModel>();
  if (r == 0) model->load_state_dict(init);
  opts.process_group = borrow(pg);
  DistributedDataParallel ddp(model, opts);
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    pg.reset_comm_stats();
    for (int a = 0; a < accumulate; ++a)
      ddp_micro_batch(ddp, s * accumulate + a, world, r, a + 1 == accumulate);
    if (calls_per_step) {
      auto stats = pg.comm_stats().per_collective;
      calls_per_step->push_back(stats.count("all_reduce") ? stats["all_reduce"].calls : 0);
    }
    opt.step();
  }
  return params_of(*model);
}

void check_close(const std::vector<std::vector<float>>& a,
                 const std::vector<std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    REQUIRE(a[k].size() == b[k].size());
    for (size_t i = 0; i < a[k].size(); ++i)
      CHECK(a[k][i] == doctest::Approx(b[k][i]).epsilon(1e-5));
  }
}

}  // namespace

TEST_CASE("DDP on 1-4 ranks equals one process on the concatenated batches, ring and star") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    auto expected = single_process(world);
    for (Algorithm algo : {Algorithm::Ring, Algorithm::Star}) {
      run_threads(world, [&](ProcessGroup& pg) {
        check_close(ddp_run(pg, {.algorithm = algo}), expected);
      });
    }
  }
}

TEST_CASE("DDP on hierarchical all-reduce over pretend nodes equals one process: threads, shm") {
  // K nodes x L ranks (ProcessGroupOptions::ranks_per_node = L): 2x2, 2x1, 1x2 and 3x1
  for (auto [world, per_node] : {std::pair{4, 2}, {2, 1}, {2, 2}, {3, 1}}) {
    CAPTURE(world);
    CAPTURE(per_node);
    auto expected = single_process(world);
    run_threads(
        world,
        [&](ProcessGroup& pg) {
      CHECK(pg.all_reduce_algorithm(1 << 20) == "hierarchical");
      check_close(ddp_run(pg, {}), expected);
      // the last step's gradient bucket crossed nodes only where there are several
      const CollectiveStats s = pg.comm_stats().per_collective.at("all_reduce");
      CHECK((s.bytes_sent_inter_node > 0) == (world / per_node > 1));
        },
        {.engine = "hierarchical", .ranks_per_node = per_node, .nodes_share_memory = true});
  }
  auto expected = single_process(4);
  // a child's CHECK does not reach this process: it throws, and its message comes back
  auto outcomes = run_processes(
      4,
      [&](ProcessGroup& pg) {
    const auto got = ddp_run(pg, {.algorithm = Algorithm::Hierarchical});
    DPLAB_CHECK(got.size() == expected.size(), "rank {}: {} parameters, expected {}", pg.rank(),
                got.size(), expected.size());
    for (size_t k = 0; k < got.size(); ++k)
      for (size_t i = 0; i < got[k].size(); ++i)
        DPLAB_CHECK(std::fabs(got[k][i] - expected[k][i]) <= 1e-5 * (1 + std::fabs(expected[k][i])),
                    "rank {}: parameter {} [{}] is {}, one process gives {}", pg.rank(), k, i,
                    got[k][i], expected[k][i]);
      },
      {.ranks_per_node = 2, .nodes_share_memory = true});
  for (auto& o : outcomes) CHECK_MESSAGE(o.ok, o.message);
}

TEST_CASE("no_sync accumulation over K micro-batches equals single-process accumulation K*N") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    // mean over K micro-batches of the rank-average: one process sums K grads of full batches
    auto expected = single_process(world, /*accumulate=*/3);
    run_threads(world, [&](ProcessGroup& pg) {
      std::vector<int64_t> calls;
      check_close(ddp_run(pg, {}, 3, &calls), expected);
      for (int64_t c : calls)
        CHECK(c == 1);  // one bucket, one all-reduce per step, none inside no_sync
    });
  }
}

TEST_CASE("bucket sizes from one parameter per bucket to one bucket give identical results") {
  auto expected = single_process(3);
  run_threads(3, [&](ProcessGroup& pg) {
    std::vector<int64_t> tiny_calls, huge_calls;
    auto tiny = ddp_run(pg, {.bucket_cap_mb = 1e-6}, 1, &tiny_calls);
    auto huge = ddp_run(pg, {.bucket_cap_mb = 1000}, 1, &huge_calls);
    check_close(tiny, expected);
    check_close(huge, expected);
    for (int64_t c : tiny_calls) CHECK(c == 4);  // net1.weight, net1.bias, net2.weight, net2.bias
    for (int64_t c : huge_calls) CHECK(c == 1);
  });
}

TEST_CASE("buckets are filled in reverse registration order up to the cap") {
  std::vector<Tensor> ps{zeros({100}), zeros({100}), zeros({300}), zeros({50})};
  auto b = assign_buckets(ps, 800);  // 200 floats per bucket
  CHECK(b == std::vector<std::vector<size_t>>{{0, 1}, {2}, {3}});
}

TEST_CASE("gradient_as_bucket_view leaves .grad as views of the buckets, same values") {
  auto expected = single_process(2);
  run_threads(2, [&](ProcessGroup& pg) {
    check_close(ddp_run(pg, {.gradient_as_bucket_view = true}), expected);
  });
}

TEST_CASE("an unused parameter is an error naming it, unless find_unused_parameters") {
  run_threads(2, [&](ProcessGroup& pg) {
    auto model = std::make_shared<Partly>();
    DistributedDataParallel ddp(model, {.process_group = borrow(pg)});
    CHECK_THROWS_WITH_AS(
        ddp.forward(ones({2, 3})).sum().backward(),
        doctest::Contains("received no gradient in this backward: b.weight, b.bias"), Error);
  });
  run_threads(2, [&](ProcessGroup& pg) {
    auto model = std::make_shared<Partly>();
    DistributedDataParallel ddp(model,
                                {.find_unused_parameters = true, .process_group = borrow(pg)});
    ddp.forward(ones({2, 3}) * static_cast<float>(pg.rank() + 1)).sum().backward();
    CHECK(model->b->weight.grad().defined());
    CHECK(model->b->weight.grad().sum().item() == 0.0f);
    // a's gradient is the average over ranks: d sum(x W^T)/dW = column sums of x = 2 * (r+1)
    CHECK(model->a->weight.grad().at({0, 0}) == doctest::Approx((2.0f + 4.0f) / 2));
  });
}

TEST_CASE("ranks that wrap different models are told so at construction") {
  CHECK_THROWS_WITH_AS(run_threads(
                           2,
                           [&](ProcessGroup& pg) {
    std::shared_ptr<nn::Module> m =
        pg.rank() == 0 ? std::shared_ptr<nn::Module>(std::make_shared<models::ToyModel>())
                       : std::make_shared<Partly>();
    DistributedDataParallel ddp(m, {.process_group = borrow(pg)});
                           }),
                       doctest::Contains("ranks wrap different models"), Error);
}

TEST_CASE("DDP over forked processes and shared memory, and a rank that fails mid-step") {
  auto expected = single_process(3);
  auto outcomes =
      run_processes(3, [&](ProcessGroup& pg) { check_close(ddp_run(pg, {}), expected); });
  for (auto& o : outcomes) CHECK_MESSAGE(o.ok, o.message);

  // The harness's long timeout (30 s): a rank that throws is found at once, without one,
  // and the message says so (its failure was passed on), rather than "timed out".
  auto failed = run_processes(3, [&](ProcessGroup& pg) {
    manual_seed(0);
    auto model = std::make_shared<models::ToyModel>();
    DistributedDataParallel ddp(model, {.process_group = borrow(pg)});
    if (pg.rank() == 1) throw Error("rank 1 fails on purpose before its backward");
    mse_loss(ddp.forward(ones({2, 10})), zeros({2, 5})).backward();
  });
  CHECK_FALSE(failed[1].ok);
  for (int r : {0, 2}) {
    CAPTURE(failed[r].message);
    CHECK_FALSE(failed[r].ok);
    CHECK(failed[r].message.find("failed because rank 1 failed") != std::string::npos);
    CHECK(failed[r].message.find("timed out") == std::string::npos);
  }
}
