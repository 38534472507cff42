// float16: conversions (against known bit patterns and round trips), Tensor casts, the
// collectives on Float16 tensors (each addition in float, rounded to half), and DDP's
// fp16_compress_hook: exactly half the all-reduce bytes, parameters within half precision
// of float32 DDP.
#include <doctest/doctest.h>

#include <cmath>

#include "framework/backend/cpu/cpu_half.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/ddp/compression.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/parallel/rank_harness.h"

using dplab::parallel::testing::borrow;

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::initial_state;  // the reference job's ToyModel state
using dplab::parallel::testing::run_threads;

TEST_CASE(
    "float <-> half conversions: known values, rounding to nearest even, overflow, subnormals") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);  // the largest half
  CHECK(float_to_half(65520.0f) == 0x7c00);  // rounds past it: inf
  CHECK(float_to_half(0.1f) == 0x2e66);
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);             // the smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -26)) == 0x0000);             // below half of it: zero
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // a tie: to even (down)
  CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // a tie: to even (up)
  CHECK(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  CHECK(half_to_float(0x3555) == doctest::Approx(0.33325195f).epsilon(1e-7));
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    auto bits = static_cast<uint16_t>(h);
    float f = half_to_float(bits);
    if (std::isnan(f)) continue;
    if (float_to_half(f) != bits) ++mismatches;  // every half survives a round trip
  }
  CHECK(mismatches == 0);
}

TEST_CASE("Tensor::to(Float16) and back keeps values to 2^-11 relative; shapes and sizes hold") {
  Generator g(1);
  Tensor x = randn({3, 7}, {}, &g);
  Tensor h = x.to(DType::Float16);
  CHECK(h.dtype() == DType::Float16);
  CHECK(h.nbytes() == 3 * 7 * 2);
  CHECK(element_size(DType::Float16) == 2);
  CHECK(dtype_name(DType::Float16) == "float16");
  auto back = h.to(DType::Float32).to_vector<float>(), orig = x.to_vector<float>();
  for (size_t i = 0; i < back.size(); ++i)
    CHECK(std::abs(back[i] - orig[i]) <= std::abs(orig[i]) * 0x1p-11f + 1e-7f);
  CHECK(h.to_vector<uint16_t>()[0] == float_to_half(orig[0]));
  CHECK(h.at({0, 0}) == half_to_float(float_to_half(orig[0])));  // item()/at() read through float32
  CHECK(zeros({4}, {.dtype = DType::Float16}).to(DType::Float32).to_vector<float>() ==
        std::vector<float>(4, 0.0f));
  // float16 -> int64 goes through float32 and truncates, as .long() does (tests/amp has more)
  CHECK(from_vector(std::vector<float>{2.75f, -3.5f}, {2})
            .to(DType::Float16)
            .to(DType::Int64)
            .to_vector<int64_t>() == std::vector<int64_t>{2, -3});
}

TEST_CASE("all_reduce of Float16 tensors, ring and star, 1-4 ranks, sizes that do not divide") {
  for (int world = 1; world <= 4; ++world) {
    for (Algorithm algo : {Algorithm::Ring, Algorithm::Star}) {
      CAPTURE(world);
      run_threads(world, [&](ProcessGroup& pg) {
        // Small integers and halves are exact in float16, so the sums are exact too.
        std::vector<float> v(13);
        for (size_t i = 0; i < v.size(); ++i)
          v[i] = static_cast<float>(i) * 0.5f + static_cast<float>(pg.rank());
        Tensor t = from_vector(v, {13}).to(DType::Float16);
        pg.all_reduce(t, parallel::ReduceOp::Sum, algo);
        auto got = t.to(DType::Float32).to_vector<float>();
        for (size_t i = 0; i < v.size(); ++i)
          CHECK(got[i] == static_cast<float>(world) * static_cast<float>(i) * 0.5f +
                              world * (world - 1) / 2.0f);
        Tensor m =
            from_vector(std::vector<float>{static_cast<float>(pg.rank())}, {1}).to(DType::Float16);
        pg.all_reduce(m, parallel::ReduceOp::Max, algo);
        CHECK(m.to(DType::Float32).item() == static_cast<float>(world - 1));
      });
    }
  }
}

TEST_CASE("all_reduce of Float16 tensors between processes over shared memory") {
  auto outcomes = dplab::parallel::testing::run_processes(3, [](ProcessGroup& pg) {
    Tensor t = full({1001}, 0.25 * (pg.rank() + 1), {.dtype = DType::Float16});
    pg.all_reduce(t, parallel::ReduceOp::Sum);
    for (float v : t.to(DType::Float32).to_vector<float>())
      DPLAB_CHECK(v == 1.5f, "rank {}: expected 0.25 + 0.5 + 0.75 = 1.5, got {}", pg.rank(), v);
    int64_t half_bytes = pg.comm_stats().total.bytes_sent;
    pg.reset_comm_stats();
    Tensor f = full({1001}, 1.0);
    pg.all_reduce(f, parallel::ReduceOp::Sum);
    int64_t float_bytes = pg.comm_stats().total.bytes_sent;
    DPLAB_CHECK(half_bytes * 2 == float_bytes && half_bytes > 0,
                "rank {}: float16 should send half the bytes of float32, sent {} vs {}", pg.rank(),
                half_bytes, float_bytes);
  });
  for (const auto& o : outcomes) CHECK_MESSAGE(o.ok, o.message);
}

namespace {

struct RunResult {
  std::vector<float> params;
  int64_t allreduce_bytes_sent = 0, allreduce_calls = 0;
};

// 3 steps of DDP(ToyModel) from one fixed init; bytes counted over the training steps only.
RunResult train(ProcessGroup& pg, const StateDict& init, CommHook hook) {
  auto model = std::make_shared<models::ToyModel>();
  model->load_state_dict(init);
  DistributedDataParallel ddp(
      model, {.bucket_cap_mb = 0.0001, .process_group = borrow(pg), .comm_hook = hook});
  optim::SGD opt(ddp.parameters(), {.lr = 0.1});
  pg.reset_comm_stats();
  for (int s = 0; s < 3; ++s) {
    Generator g(50 + s * 10 + pg.rank());
    opt.zero_grad();
    mse_loss(ddp.forward(randn({6, 10}, {}, &g)), randn({6, 5}, {}, &g)).backward();
    opt.step();
  }
  RunResult r;
  auto st = pg.comm_stats().per_collective["all_reduce"];
  r.allreduce_bytes_sent = st.bytes_sent;
  r.allreduce_calls = st.calls;
  for (const Tensor& p : model->parameters()) {
    auto v = p.to_vector<float>();
    r.params.insert(r.params.end(), v.begin(), v.end());
  }
  return r;
}

}  // namespace

TEST_CASE("fp16_compress_hook: the bucket holds the average, traffic is exactly half, results "
          "within fp16") {
  const StateDict init = initial_state(3);
  for (int world : {2, 3}) {
    CAPTURE(world);
    run_threads(world, [&](ProcessGroup& pg) {
      // The hook alone: a bucket of rank-dependent values becomes their average.
      Tensor bucket = full({7}, static_cast<double>(pg.rank() + 1) * 0.25);
      fp16_compress_hook()(pg, bucket)->wait();
      for (float v : bucket.to_vector<float>())
        CHECK(v == doctest::Approx((world + 1) / 2.0 * 0.25));

      RunResult fp32 = train(pg, init, allreduce_hook());
      RunResult fp16 = train(pg, init, fp16_compress_hook());
      CHECK(fp16.allreduce_calls == fp32.allreduce_calls);
      CHECK(fp32.allreduce_bytes_sent > 0);
      CHECK(fp16.allreduce_bytes_sent * 2 == fp32.allreduce_bytes_sent);
      REQUIRE(fp16.params.size() == fp32.params.size());
      float max_diff = 0;
      for (size_t i = 0; i < fp32.params.size(); ++i)
        max_diff = std::max(max_diff, std::abs(fp16.params[i] - fp32.params[i]));
      CHECK(max_diff < 2e-3f);  // 3 steps of lr 0.1 on gradients rounded to ~5e-4 relative
      CHECK(max_diff > 0.0f);   // it did go through half precision
    });
  }
}

TEST_CASE("CUDA float16 cast, fill and reduce_into agree bit for bit with the CPU" *
          doctest::skip(cuda_device_count() == 0)) {
  Generator g(9);
  Tensor x = mul_scalar(randn({1001}, {}, &g), 100.0f), y = randn({1001}, {}, &g);
  Device gpu("cuda:0");
  Tensor hx = x.to(DType::Float16), hy = y.to(DType::Float16);
  Tensor gx = x.to(gpu).to(DType::Float16), gy = y.to(gpu).to(DType::Float16);
  CHECK(gx.to(Device("cpu")).to_vector<uint16_t>() == hx.to_vector<uint16_t>());
  CHECK(gx.to(DType::Float32).to(Device("cpu")).to_vector<float>() ==
        hx.to(DType::Float32).to_vector<float>());
  for (dplab::ReduceKind op :
       {dplab::ReduceKind::Sum, dplab::ReduceKind::Max, dplab::ReduceKind::Min}) {
    Tensor c = hx.contiguous_copy_on(Device("cpu")), d = gx.contiguous_copy_on(gpu);
    backend_for(Device("cpu"))
        .reduce_into(op, DType::Float16, c.raw_data(), hy.raw_data(), c.numel());
    backend_for(gpu).reduce_into(op, DType::Float16, d.raw_data(), gy.raw_data(), d.numel());
    CHECK(d.to(Device("cpu")).to_vector<uint16_t>() == c.to_vector<uint16_t>());
  }
  CHECK(full({5}, 0.1, {.dtype = DType::Float16, .device = gpu})
            .to(Device("cpu"))
            .to_vector<uint16_t>() == std::vector<uint16_t>(5, 0x2e66));
}
