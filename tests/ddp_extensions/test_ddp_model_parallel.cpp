// DDP over a model split across two devices per process (models::ToyMpModel: net1 on
// cpu:2r, net2 on cpu:2r+1) equals one process training ToyModel on the concatenated batch;
// buckets are formed per device (a bucket never mixes devices).
#include <doctest/doctest.h>

#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/parallel/rank_harness.h"

using dplab::parallel::testing::borrow;
using namespace dplab::parallel::testing;  // the reference job: batches, kSteps, kPerRank

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_threads;

TEST_CASE("DDP + ToyMpModel (two devices per rank) on 2 ranks equals single-process ToyModel") {
  const int world = 2;
  StateDict init = initial_state(7);  // made once in the test thread, loaded by every rank
  auto expected = single_process_from(init, world);
  for (double cap_mb : {25.0, 1e-6}) {
    CAPTURE(cap_mb);
    run_threads(world, [&](ProcessGroup& pg) {
      const int r = pg.rank();
      Device dev0(DeviceKind::CPU, 2 * r), dev1(DeviceKind::CPU, 2 * r + 1);
      auto model = std::make_shared<models::ToyMpModel>(dev0, dev1);
      model->load_state_dict(init);
      DistributedDataParallel ddp(model, {.bucket_cap_mb = cap_mb, .process_group = borrow(pg)});
      // Per device: {net2.*} on dev1, {net1.*} on dev0 (reverse order), or one per parameter.
      const auto& buckets = ddp.reducer().buckets();
      CHECK(buckets.size() == (cap_mb > 1 ? 2u : 4u));
      for (const Bucket& b : buckets)
        for (const BucketSlot& s : b.slots)
          CHECK(model->parameters()[s.param].device() == b.flat.device());
      CHECK(buckets.front().flat.device() == dev1);
      CHECK(buckets.back().flat.device() == dev0);
      optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
      for (int s = 0; s < kSteps; ++s) {
        opt.zero_grad();
        Tensor x = rows_of(batch_x(s, world), r).to(dev0);
        Tensor y = rows_of(batch_y(s, world), r).to(dev1);
        mse_loss(ddp.forward(x), y).backward();
        opt.step();
      }
      auto params = model->parameters();
      CHECK(params[0].device() == dev0);
      CHECK(params[3].device() == dev1);
      REQUIRE(params.size() == expected.size());
      for (size_t k = 0; k < params.size(); ++k) {
        auto got = params[k].to_vector<float>();
        for (size_t i = 0; i < got.size(); ++i)
          CHECK(got[i] == doctest::Approx(expected[k][i]).epsilon(1e-5));
      }
    });
  }
}

TEST_CASE("DDP with an explicit .device still requires every parameter there") {
  run_threads(1, [](ProcessGroup& pg) {
    auto model = std::make_shared<models::ToyMpModel>(Device("cpu:0"), Device("cpu:1"));
    CHECK_THROWS_WITH_AS(
        DistributedDataParallel(model, {.device = Device("cpu:0"), .process_group = borrow(pg)}),
        doctest::Contains("net2.weight is on cpu:1"), Error);
  });
}

TEST_CASE("assign_buckets starts a new bucket when the device changes") {
  std::vector<Tensor> ps{zeros({10}), zeros({10}, {.device = Device("cpu:1")}),
                         zeros({10}, {.device = Device("cpu:1")}), zeros({10})};
  CHECK(assign_buckets(ps, 1 << 20) == std::vector<std::vector<size_t>>{{0}, {1, 2}, {3}});
}
