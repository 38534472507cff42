// 14_ddp_model_parallel.cpp: DDP and model parallelism together (PyTorch's
// demo_model_parallel): each process holds ONE replica split over TWO devices.
// What you will learn:
//   - ToyMpModel puts net1 on dev0 and net2 on dev1; forward moves the activation across
//     (to_device), backward moves its gradient back,
//   - DDP wraps such a module unchanged when no .device is given: it forms gradient buckets
//     per device (a bucket is one flat tensor, so it never mixes devices),
//   - 2 ranks x 2 devices train exactly like one process on the concatenated batch.
// Rank r uses the logical devices cpu:2r and cpu:2r+1 (cuda:2r, cuda:2r+1 on 4 GPUs).
// Run: ./14_ddp_model_parallel. Read 14_ddp_model_parallel.md beside it.
#include <cmath>
#include <cstdio>

#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace par = dplab::parallel;

constexpr int kRanks = 2, kSteps = 5;
constexpr int64_t kRows = 20;  // per rank, as in PyTorch's demo

Tensor inputs(int step) {
  Generator g(static_cast<uint64_t>(100 + step));
  return randn({kRanks * kRows, 10}, {}, &g);
}
Tensor labels(int step) {
  Generator g(static_cast<uint64_t>(200 + step));
  return randn({kRanks * kRows, 5}, {}, &g);
}

void worker(int rank) {
  par::init_process_group({.timeout = par::Seconds(30.0)});
  Device dev0(DeviceKind::CPU, 2 * rank), dev1(DeviceKind::CPU, 2 * rank + 1);
  manual_seed(0);
  auto model = std::make_shared<models::ToyMpModel>(dev0, dev1);
  par::DistributedDataParallel ddp(model);  // rank 0's weights are broadcast: all ranks start equal
  for (const auto& b : ddp.reducer().buckets())
    std::printf("rank %d: bucket of %zu parameters on %s\n", rank, b.slots.size(), b.flat.device().str().c_str());

  optim::SGD opt(ddp.parameters(), {.lr = 0.001});
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    Tensor x = inputs(s).narrow(rank * kRows, kRows).to(dev0);
    Tensor y = labels(s).narrow(rank * kRows, kRows).to(dev1);  // outputs come out on dev1
    Tensor loss = mse_loss(ddp.forward(x), y);
    loss.backward();
    opt.step();
    if (rank == 0) std::printf("step %d: rank 0 loss %.6f\n", s, loss.item());
  }

  // The check: one process, one device, ToyModel (same layers), the concatenated batches.
  // Rank 0's initial weights came from manual_seed(0), and ToyModel draws them the same way.
  if (rank == 0) {
    manual_seed(0);
    models::ToyModel ref;
    optim::SGD ref_opt(ref.parameters(), {.lr = 0.001});
    for (int s = 0; s < kSteps; ++s) {
      ref_opt.zero_grad();
      mse_loss(ref.forward(inputs(s)), labels(s)).backward();
      ref_opt.step();
    }
    double max_diff = 0;
    auto got = model->parameters(), want = ref.parameters();
    for (size_t k = 0; k < got.size(); ++k) {
      auto a = got[k].to_vector<float>(), b = want[k].to_vector<float>();
      for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i] - b[i])));
    }
    std::printf("largest difference from single-process ToyModel on all %lld rows: %.2g\n",
                static_cast<long long>(kRanks * kRows), max_diff);
    DPLAB_CHECK(max_diff < 1e-5, "DDP + model parallel should equal single-process training, differs by {}",
                max_diff);
  }
  par::destroy_process_group();
}

int main() { return tutorials::run_spawned("14_ddp_model_parallel", kRanks, worker); }
