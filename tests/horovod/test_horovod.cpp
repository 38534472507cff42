// The Horovod-style API: DistributedOptimizer (per-parameter async all-reduce, waited in
// step()) trains exactly like DDP; broadcast_parameters makes ranks equal; the fp16 form
// stays within half precision of DDP with fp16_compress_hook; misuse is reported.
#include <doctest/doctest.h>

#include <unistd.h>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/compression.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/horovod/horovod.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/parallel/rank_harness.h"

using dplab::parallel::testing::borrow;

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::initial_state;  // the reference job's ToyModel state
using dplab::parallel::testing::run_threads;

namespace {

constexpr int kSteps = 4;

// Rank r's batch of step s (rank-dependent data, as in real data-parallel training).
std::pair<Tensor, Tensor> batch(int s, int r) {
  Generator g(1000 + 17 * s + r);
  Tensor x = randn({5, 10}, {}, &g);
  return {x, randn({5, 5}, {}, &g)};
}

std::vector<float> flat_params(nn::Module& m) {
  std::vector<float> out;
  for (const Tensor& p : m.parameters()) {
    auto v = p.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<float> train_ddp(ProcessGroup& pg, const StateDict& init, CommHook hook) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(init);
  DistributedDataParallel ddp(model, {.process_group = borrow(pg), .comm_hook = hook});
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, pg.rank());
    opt.zero_grad();
    mse_loss(ddp.forward(x), y).backward();
    opt.step();
  }
  return flat_params(*model);
}

std::vector<float> train_hvd(ProcessGroup& pg, const StateDict& init, Compression compression) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(init);
  if (pg.rank() != 0) {  // ranks start different; broadcast_parameters makes them rank 0's
    NoGradGuard no_grad;
    for (Tensor p : model->parameters()) p.fill_(pg.rank());
  }
  hvd::broadcast_parameters(*model, /*root_rank=*/0, &pg);
  auto sgd = std::make_shared<optim::SGD>(model->parameters(),
                                          optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  hvd::DistributedOptimizer opt(sgd, model->named_parameters(), compression, borrow(pg));
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, pg.rank());
    opt.zero_grad();
    mse_loss(model->forward(x), y).backward();
    opt.step();
  }
  CHECK(opt.allreduces_launched() == 4 * kSteps);  // one per parameter per step
  return flat_params(*model);
}

}  // namespace

TEST_CASE("Horovod-style DistributedOptimizer training equals DDP training, 1-3 ranks") {
  StateDict init = initial_state(11);
  for (int world = 1; world <= 3; ++world) {
    CAPTURE(world);
    run_threads(world, [&](ProcessGroup& pg) {
      auto ddp = train_ddp(pg, init, allreduce_hook());
      auto hvd = train_hvd(pg, init, Compression::none);
      REQUIRE(ddp.size() == hvd.size());
      for (size_t i = 0; i < ddp.size(); ++i)
        CHECK(hvd[i] == doctest::Approx(ddp[i]).epsilon(1e-5));
    });
  }
}

TEST_CASE("Horovod-style fp16 compression stays within half precision of DDP's fp16 hook") {
  StateDict init = initial_state(11);
  run_threads(3, [&](ProcessGroup& pg) {
    auto ddp = train_ddp(pg, init, fp16_compress_hook());
    auto ref = train_ddp(pg, init, allreduce_hook());
    auto hvd = train_hvd(pg, init, Compression::fp16);
    float to_ddp16 = 0, to_fp32 = 0;
    for (size_t i = 0; i < ddp.size(); ++i) {
      to_ddp16 = std::max(to_ddp16, std::abs(hvd[i] - ddp[i]));
      to_fp32 = std::max(to_fp32, std::abs(hvd[i] - ref[i]));
    }
    CHECK(to_ddp16 < 1e-3f);
    CHECK(to_fp32 < 3e-3f);
    CHECK(to_fp32 > 0.0f);
  });
}

TEST_CASE(
    "DistributedOptimizer reports misuse: foreign parameters, gradients that skipped the hooks") {
  run_threads(2, [](ProcessGroup& pg) {
    auto model = std::make_shared<models::ToyModel>();
    auto sgd =
        std::make_shared<optim::SGD>(model->net1->parameters(), optim::SGDOptions{.lr = 0.1});
    CHECK_THROWS_WITH_AS(
        hvd::DistributedOptimizer(sgd, model->named_parameters(), Compression::none, borrow(pg)),
        doctest::Contains("holds 2 parameters but 4"), Error);
    // A backward before the optimizer existed: its gradients were never averaged.
    auto [x, y] = batch(0, pg.rank());
    mse_loss(model->forward(x), y).backward();
    auto sgd_all = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1});
    hvd::DistributedOptimizer opt(sgd_all, model->named_parameters(), Compression::none,
                                  borrow(pg));
    CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("were not averaged"), Error);
    // After the next backward, the hooks run and step() goes through.
    opt.zero_grad();
    mse_loss(model->forward(x), y).backward();
    opt.step();
    CHECK(opt.allreduces_launched() == 4);
  });
}

TEST_CASE("hvd::init, rank, size, local_rank map onto the default process group") {
  std::string path = "/tmp/dplab-hvd-test-" + std::to_string(getpid());
  ::unlink(path.c_str());
  hvd::init({.init_method = "file://" + path, .rank = 0, .world_size = 1});
  CHECK(is_initialized());
  CHECK(hvd::rank() == 0);
  CHECK(hvd::size() == 1);
  CHECK(hvd::local_rank() == 0);
  hvd::init();  // a second init joins the existing group: no error
  auto model = std::make_shared<models::ToyModel>();
  hvd::broadcast_parameters(*model, 0);  // over the default group
  CHECK_THROWS_WITH_AS(hvd::broadcast_parameters(*model, 1),
                       doctest::Contains("root_rank must lie in [0, 1)"), Error);
  hvd::shutdown();
  CHECK(!is_initialized());
  ::unlink(path.c_str());
}
