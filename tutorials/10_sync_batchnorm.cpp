// 10_sync_batchnorm.cpp: why BatchNorm under data parallelism wants SyncBatchNorm.
// What you will learn:
//   - with DDP each rank's BatchNorm normalises with the statistics of ITS rows only: with a
//     few rows per rank those means are noisy and differ from rank to rank,
//   - convert_sync_batchnorm(model) swaps every BatchNorm for a SyncBatchNorm that uses the
//     statistics of the global batch, identical on every rank,
//   - how little it sends: (2C+1) floats forward and 2C backward per layer, whatever the
//     batch size (sums, not activations).
// Run: ./10_sync_batchnorm [--ranks 4] [--rows 4]. Read 10_sync_batchnorm.md beside it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp/sync_batch_norm.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace par = dplab::parallel;

constexpr int64_t kChannels = 3;
int g_ranks = 4;
int64_t g_rows = 4;  // rows per rank: "small per-rank batches"

// The global batch: every rank can make it (same seed) and takes its own rows.
Tensor global_batch() {
  Generator g(2024);
  return add_scalar(randn({g_ranks * g_rows, kChannels}, {}, &g), 1.0f);  // true mean 1
}

// momentum = 1 makes running_mean exactly the mean the layer normalised with, so we can
// print what each layer used.
std::shared_ptr<nn::Module> make_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kChannels, kChannels), std::make_shared<nn::BatchNorm1d>(kChannels,
      nn::BatchNormOptions{.momentum = 1.0})});
}

// One DDP training step; returns the BatchNorm's running mean (= the mean it used). The
// traffic counters are reset after DDP's construction (its checks and broadcast), so they
// count the step alone.
std::vector<float> one_step(std::shared_ptr<nn::Module> model, const Tensor& x) {
  par::DistributedDataParallel ddp(model);
  par::default_process_group().reset_comm_stats();
  sum(ddp.forward(x)).backward();
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm>(model->named_children()[1].second);
  return bn->running_mean.to_vector<float>();
}

void worker(int rank) {
  par::init_process_group({.timeout = par::Seconds(30.0)});
  auto& pg = par::default_process_group();
  Tensor x = global_batch().narrow(rank * g_rows, g_rows);

  manual_seed(0);
  std::vector<float> bn_mean = one_step(make_model(), x);
  auto bn_traffic = pg.comm_stats().per_collective["all_reduce"];
  manual_seed(0);
  // Conversion: the Linear is kept, the BatchNorm1d becomes a SyncBatchNorm (same tensors).
  std::vector<float> sync_mean = one_step(par::convert_sync_batchnorm(make_model()), x);
  auto traffic = pg.comm_stats().per_collective["all_reduce"];

  // Gather every rank's means on every rank so that rank 0 can print the table.
  std::vector<Tensor> bn_all(g_ranks), sync_all(g_ranks);
  for (int r = 0; r < g_ranks; ++r) bn_all[r] = zeros({kChannels}), sync_all[r] = zeros({kChannels});
  pg.all_gather(bn_all, from_vector(bn_mean, {kChannels}));
  pg.all_gather(sync_all, from_vector(sync_mean, {kChannels}));

  // The reference: the mean of the whole batch after the same (rank 0's) Linear layer.
  manual_seed(0);
  auto ref = make_model();
  par::DistributedDataParallel ref_ddp(ref);  // broadcasts rank 0's weights, as above
  Tensor full = ref->named_children()[0].second->forward(global_batch());
  std::vector<float> global_mean = mean(full, {0}).to_vector<float>();

  double worst_sync = 0, spread_bn = 0;
  for (int r = 0; r < g_ranks; ++r) {
    auto b = bn_all[r].to_vector<float>(), s = sync_all[r].to_vector<float>();
    for (int64_t c = 0; c < kChannels; ++c) {
      worst_sync = std::max(worst_sync, std::abs(static_cast<double>(s[c] - global_mean[c])));
      spread_bn = std::max(spread_bn, std::abs(static_cast<double>(b[c] - global_mean[c])));
    }
  }
  if (rank == 0) {
    std::printf("%d ranks, %lld rows each, %lld channels\n", g_ranks, static_cast<long long>(g_rows),
                static_cast<long long>(kChannels));
    std::printf("%-10s %-28s %-28s\n", "rank", "BatchNorm mean (own rows)", "SyncBatchNorm mean");
    for (int r = 0; r < g_ranks; ++r) {
      auto b = bn_all[r].to_vector<float>(), s = sync_all[r].to_vector<float>();
      std::printf("%-10d % .4f % .4f % .4f      % .4f % .4f % .4f\n", r, b[0], b[1], b[2], s[0], s[1], s[2]);
    }
    std::printf("%-10s %-28s % .4f % .4f % .4f\n", "global", "", global_mean[0], global_mean[1], global_mean[2]);
    std::printf("largest |BatchNorm mean - global mean|     = %.4f\n", spread_bn);
    std::printf("largest |SyncBatchNorm mean - global mean| = %.2g\n", worst_sync);
    std::printf("all-reduces in one training step: BatchNorm %lld (%lld bytes sent by rank 0), "
                "SyncBatchNorm %lld (%lld bytes)\n",
                static_cast<long long>(bn_traffic.calls), static_cast<long long>(bn_traffic.bytes_sent),
                static_cast<long long>(traffic.calls), static_cast<long long>(traffic.bytes_sent));
    std::printf("stats messages: forward %lld floats, backward %lld floats per layer\n",
                static_cast<long long>(2 * kChannels + 1), static_cast<long long>(2 * kChannels));
  }
  // The claims the .md makes; a failure here fails the tutorial's test.
  DPLAB_CHECK(worst_sync < 1e-4, "SyncBatchNorm used a mean {} away from the global one", worst_sync);
  DPLAB_CHECK(traffic.calls == bn_traffic.calls + 2, "SyncBatchNorm should add 2 all-reduces (forward "
              "and backward statistics) to DDP's {}, got {}", bn_traffic.calls, traffic.calls);
  DPLAB_CHECK(spread_bn > 0.05, "per-rank BatchNorm means should differ from the global mean, got {}", spread_bn);
  par::destroy_process_group();
}

int main(int argc, char** argv) {
  if (auto exit = tutorials::parse_int_options(argc, argv, "Tutorial 10: SyncBatchNorm",
                                                {{"--ranks", &g_ranks, "ranks to spawn", 1, 64},
                                                 {"--rows", &g_rows, "rows of the batch per rank", 1}}))
    return *exit;
  return tutorials::run_spawned("10_sync_batchnorm", g_ranks, worker);
}
