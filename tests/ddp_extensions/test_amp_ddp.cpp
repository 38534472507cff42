// Mixed precision under DDP and Horovod: a low-precision model (Apex O2: float16 or
// bfloat16 weights, float32 masters in the optimizer) has 16-bit gradients, and they are
// all-reduced as they are: exactly half the bytes of the float32 run, same number of
// all-reduces, the average right, and the weights within 16-bit precision of float32 DDP.
#include <doctest/doctest.h>

#include <cmath>

#include "framework/amp/master_weights.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/compression.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::borrow;
using dplab::parallel::testing::run_threads;

namespace {

struct AmpRun {
  std::vector<float> params;
  int64_t allreduce_bytes_sent = 0, allreduce_calls = 0;
};

// 3 steps of DDP(ToyModel) from one init; `low` = Float32 for the plain run, else O2.
AmpRun train(ProcessGroup& pg, const StateDict& init, DType low) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(init);
  if (low != DType::Float32) amp::cast_module_(*model, low);
  DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.0001, .process_group = borrow(pg)});
  amp::MasterWeightOptimizer opt(ddp.parameters(), [](std::vector<Tensor> masters) {
    return std::make_unique<optim::SGD>(masters, optim::SGDOptions{.lr = 0.1});
  });
  pg.reset_comm_stats();
  for (int s = 0; s < 3; ++s) {
    Generator g(50 + s * 10 + pg.rank());
    opt.zero_grad();
    Tensor x = randn({6, 10}, {}, &g).to(low), y = randn({6, 5}, {}, &g);
    mse_loss(ddp.forward(x).to(DType::Float32), y).backward();
    opt.step();
  }
  AmpRun r;
  auto st = pg.comm_stats().per_collective["all_reduce"];
  r.allreduce_bytes_sent = st.bytes_sent;
  r.allreduce_calls = st.calls;
  for (const Tensor& p : opt.params()) {  // the float32 masters
    auto v = p.to_vector<float>();
    r.params.insert(r.params.end(), v.begin(), v.end());
  }
  return r;
}

}  // namespace

TEST_CASE(
    "DDP with 16-bit gradients (Apex O2): half the all-reduce bytes, parameters close to float32") {
  Generator g(3);
  StateDict init;
  init.insert("net1.weight", mul_scalar(randn({10, 10}, {}, &g), 0.3f));
  init.insert("net1.bias", randn({10}, {}, &g));
  init.insert("net2.weight", mul_scalar(randn({5, 10}, {}, &g), 0.3f));
  init.insert("net2.bias", randn({5}, {}, &g));
  for (int world : {2, 3}) {
    CAPTURE(world);
    run_threads(world, [&](ProcessGroup& pg) {
      const AmpRun fp32 = train(pg, init, DType::Float32);
      for (DType low : {DType::Float16, DType::BFloat16}) {
        CAPTURE(dtype_name(low));
        const AmpRun half = train(pg, init, low);
        CHECK(half.allreduce_calls == fp32.allreduce_calls);
        CHECK(fp32.allreduce_bytes_sent > 0);
        CHECK(half.allreduce_bytes_sent * 2 == fp32.allreduce_bytes_sent);
        REQUIRE(half.params.size() == fp32.params.size());
        float max_diff = 0;
        for (size_t i = 0; i < fp32.params.size(); ++i)
          max_diff = std::max(max_diff, std::fabs(half.params[i] - fp32.params[i]));
        // 16-bit inputs, weights and gradients for 3 steps of lr 0.1
        CHECK(max_diff < (low == DType::Float16 ? 5e-3f : 4e-2f));
        CHECK(max_diff > 0.0f);
      }
    });
  }
}

TEST_CASE("Horovod's average of a 16-bit gradient: divided first, summed, 2 bytes per element") {
  for (int world : {2, 4}) {
    run_threads(world, [&](ProcessGroup& pg) {
      for (DType low : {DType::Float16, DType::BFloat16}) {
        Tensor g32 = full({9}, static_cast<double>(pg.rank() + 1));
        pg.reset_comm_stats();
        all_reduce_average_async(pg, g32, Compression::none)->wait();
        const int64_t float_bytes = pg.comm_stats().total.bytes_sent;
        Tensor g16 = full({9}, static_cast<double>(pg.rank() + 1)).to(low);
        pg.reset_comm_stats();
        all_reduce_average_async(pg, g16, Compression::none)->wait();
        CHECK(g16.dtype() == low);
        CHECK(pg.comm_stats().total.bytes_sent * 2 == float_bytes);
        for (float v : g16.to(DType::Float32).to_vector<float>()) CHECK(v == (world + 1) / 2.0f);
      }
    });
  }
}
