// test_gpu_training.cpp: the GPU paths end to end, where only a GPU can tell right from
// wrong: on thread ranks sharing one GPU (DPLAB_VIRTUAL_GPUS=4, the cuda_ipc ring)
//  - an async all_reduce issued right after a long producer kernel sums the finished values
//    (the comm stream waits for the compute stream) and the result is there after wait();
//  - process groups destroyed one after another by one thread do not wait 5 s each;
//  - DDP with and without the fp16 hook on CUDA equals one process on the whole batch;
// and DataParallel over cuda:0..3 equals one device. Skipped (exit 77) without a GPU.
// Read next: parallel/transport/cuda_ipc_transport.cpp (streams), tests/ddp/ddp_reference.h.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "framework/autograd/grad_mode.h"
#include "framework/backend/backend.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "models/mlp.h"
#include "parallel/ddp/compression.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/rendezvous/hash_store.h"
#include "tests/ddp/ddp_reference.h"
#include "tests/gpu_suite.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;

namespace {

bool has_gpu() { return cuda_device_count() > 0; }

void check_params(const testing::Params& got, const testing::Params& ref, double tol,
                  const char* what) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t k = 0; k < ref.size(); ++k) {
    REQUIRE(got[k].size() == ref[k].size());
    for (std::size_t i = 0; i < ref[k].size(); ++i)
      CHECK_MESSAGE(
          std::abs(got[k][i] - ref[k][i]) <= tol * (1 + std::abs(ref[k][i])),
          what << ": tensor " << k << " element " << i << ": " << got[k][i] << " vs " << ref[k][i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return dplab::gpu_testing::gpu_suite_main(argc, argv, "test_gpu_training");
}

TEST_CASE("cuda_ipc: async all_reduce right after a long producer kernel sums finished values" *
          doctest::skip(!has_gpu())) {
  set_virtual_gpus(4);
  const int n = 3, passes = 200;
  const int64_t len = int64_t{16} << 20;  // 64 MiB per rank: each pass takes ~0.1 ms
  testing::run_threads(n, [&](ProcessGroup& pg) {
    const Device d(DeviceKind::CUDA, pg.rank());
    Tensor t = zeros({len}, {.device = d});
    auto* p = static_cast<float*>(t.raw_data());
    for (int i = 0; i < passes; ++i)  // queued, not finished, when the all_reduce starts
      backend_for(d).unary(UnaryOp::AddScalar, p, p, len, 1.0f);
    WorkPtr work = pg.all_reduce_async(t, parallel::ReduceOp::Sum);
    work->wait();
    const std::vector<float> got = t.to_vector<float>();
    const float want = static_cast<float>(n * passes);
    int64_t bad = 0;
    for (float v : got) bad += v != want;
    if (bad != 0)
      throw std::runtime_error("rank " + std::to_string(pg.rank()) + ": " + std::to_string(bad) +
                               " elements differ from " + std::to_string(want));
  });
}

TEST_CASE("cuda_ipc: thread-rank groups destroyed one after another do not wait for each other" *
          doctest::skip(!has_gpu())) {
  set_virtual_gpus(4);
  const int n = 4;
  auto store = std::make_shared<HashStore>(Seconds(10.0));
  std::vector<std::shared_ptr<ProcessGroup>> groups(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      groups[r] = create_process_group(store, r, n, {.timeout = Seconds(10.0)});
      Tensor t = ones({1000}, {.device = Device(DeviceKind::CUDA, r)});
      groups[r]->all_reduce(t);  // makes the cuda_ipc transport and its slot buffer
    });
  for (auto& t : threads) t.join();
  for (auto& g : groups) REQUIRE(g != nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& g : groups) g.reset();  // rank 0 first, while 1..3 still hold its buffer
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(secs < 2.0);  // it was 5 s per rank (the cross-process release wait)
}

TEST_CASE("DDP on CUDA thread ranks (cuda_ipc), with and without the fp16 hook, equals one "
          "process" *
          doctest::skip(!has_gpu())) {
  set_virtual_gpus(4);
  for (bool fp16 : {false, true}) {
    CAPTURE(fp16);
    const int world = 2;
    const testing::Params expected = testing::single_process(world);
    // the reference's initial weights (seed 0), made outside the rank threads: the default
    // generator is shared, so seeding it per rank would race
    manual_seed(0);
    const StateDict init = models::ToyModel().state_dict();
    std::vector<testing::Params> got(world);
    testing::run_threads(world, [&](ProcessGroup& pg) {
      const int r = pg.rank();
      const Device d(DeviceKind::CUDA, r);
      auto model = std::make_shared<models::ToyModel>();
      if (r == 0) model->load_state_dict(init);  // the others: the broadcast must fix them
      model->to(d);
      DistributedDataParallel ddp(model,
                                  {.bucket_cap_mb = 0.0001, .process_group = testing::borrow(pg)});
      if (fp16) ddp.register_comm_hook(fp16_compress_hook());
      optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
      for (int s = 0; s < testing::kSteps; ++s) {
        opt.zero_grad();
        Tensor x = testing::batch_x(s, world).narrow(r * testing::kPerRank, testing::kPerRank);
        Tensor y = testing::batch_y(s, world).narrow(r * testing::kPerRank, testing::kPerRank);
        mse_loss(ddp.forward(x.to(d)), y.to(d)).backward();
        opt.step();
      }
      got[r] = testing::params_of(*model);
    });
    check_params(got[1], got[0], 0.0, "rank 1 vs rank 0");  // identical on every rank
    check_params(got[0], expected, fp16 ? 2e-3 : 1e-5, "DDP vs one process");
  }
}

TEST_CASE("DataParallel over cuda:0..3 (one GPU shared) equals one device" *
          doctest::skip(!has_gpu())) {
  set_virtual_gpus(4);
  manual_seed(1);
  Tensor x = randn({30, 784}), y = randint(0, 10, {30});
  manual_seed(2);
  auto single = std::make_shared<models::MLP>();
  manual_seed(2);
  auto master = std::make_shared<models::MLP>();
  master->to(Device("cuda:0"));
  std::vector<Device> gpus;
  for (int k = 0; k < 4; ++k) gpus.push_back(Device(DeviceKind::CUDA, k));
  DataParallel dp(master, gpus);
  auto step = [](nn::Module& m, const Tensor& xb, const Tensor& yb) {
    for (Tensor& p : m.parameters()) p.set_grad({});
    Tensor loss = cross_entropy(m.forward(xb), yb);
    loss.backward();
    NoGradGuard g;
    for (Tensor& p : m.parameters()) p.add_(p.grad(), -0.1f);
    return loss.item();
  };
  for (int s = 0; s < 3; ++s) {
    const float l1 = step(*single, x, y);
    const float l2 = step(dp, x.to(Device("cuda:0")), y.to(Device("cuda:0")));
    CHECK(l2 == doctest::Approx(l1).epsilon(1e-4));
  }
  testing::Params a = testing::params_of(*single), b = testing::params_of(*master);
  check_params(b, a, 1e-4, "DataParallel on cuda:0..3 vs one CPU");
}
