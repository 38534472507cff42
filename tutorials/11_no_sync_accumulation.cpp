// 11_no_sync_accumulation.cpp: gradient accumulation under DDP, with and without no_sync().
// What you will learn:
//   - accumulating K micro-batches per optimizer step (a K times larger batch in the same
//     memory) costs K all-reduces per step if every backward synchronises,
//   - `auto guard = ddp.no_sync();` lets the first K-1 backwards accumulate locally and the
//     K-th all-reduce the sum: ONE all-reduce per step (per bucket), K times less traffic,
//   - both ways give the same parameters (averaging is linear), so no_sync is free speed.
// Run: ./11_no_sync_accumulation [--ranks 2] [--micro 4] [--steps 20]. Read the .md beside it.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/mlp.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace par = dplab::parallel;

int g_ranks = 2, g_micro = 4, g_steps = 20;
constexpr int64_t kRows = 16;  // per micro-batch per rank

struct Outcome {
  double ms_per_step = 0;
  double allreduces_per_step = 0;
  double mb_sent_per_step = 0;
  double ms_in_allreduce_per_step = 0;  // wall time inside all-reduce calls (comm_stats)
  std::vector<float> params;
};

// Trains g_steps optimizer steps of g_micro micro-batches each, from the same start.
Outcome train(bool use_no_sync) {
  auto& pg = par::default_process_group();
  manual_seed(0);
  auto model = std::make_shared<models::MLP>(784, std::vector<int64_t>{256, 128}, 10);
  par::DistributedDataParallel ddp(model);  // one 25 MB bucket: the MLP has 0.9 MB of gradients
  optim::SGD opt(ddp.parameters(), {.lr = 0.05});
  pg.barrier();
  pg.reset_comm_stats();
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < g_steps; ++s) {
    opt.zero_grad();
    for (int k = 0; k < g_micro; ++k) {
      Generator g(static_cast<uint64_t>(1000 * s + 10 * k + pg.rank()));  // this rank's micro-batch
      Tensor x = randn({kRows, 784}, {}, &g);
      Tensor y = randint(0, 10, {kRows}, {}, &g);
      // Dividing by K makes the accumulated gradient the mean over the K micro-batches.
      auto backward = [&] { mul_scalar(cross_entropy(ddp.forward(x), y), 1.0f / g_micro).backward(); };
      if (use_no_sync && k + 1 < g_micro) {
        auto guard = ddp.no_sync();  // local accumulation only
        backward();
      } else {
        backward();  // all-reduces the (accumulated) gradients
      }
    }
    opt.step();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = pg.comm_stats().per_collective["all_reduce"];
  Outcome o;
  o.ms_per_step = 1000.0 * secs / g_steps;
  o.allreduces_per_step = static_cast<double>(st.calls) / g_steps;
  o.mb_sent_per_step = static_cast<double>(st.bytes_sent) / g_steps / 1e6;
  o.ms_in_allreduce_per_step = 1000.0 * st.seconds / g_steps;
  for (const Tensor& p : model->parameters()) {
    auto v = p.to_vector<float>();
    o.params.insert(o.params.end(), v.begin(), v.end());
  }
  return o;
}

void worker(int rank) {
  par::init_process_group({.timeout = par::Seconds(60.0)});
  train(/*use_no_sync=*/true);  // warm-up: first-touch allocations, caches, thread start
  Outcome every = train(/*use_no_sync=*/false);
  Outcome nosync = train(/*use_no_sync=*/true);
  double max_diff = 0;
  for (size_t i = 0; i < every.params.size(); ++i)
    max_diff = std::max(max_diff, std::abs(static_cast<double>(every.params[i] - nosync.params[i])));
  if (rank == 0) {
    std::printf("%d ranks, %d micro-batches of %lld rows per optimizer step, %d steps\n", g_ranks, g_micro,
                static_cast<long long>(kRows), g_steps);
    std::printf("%-24s %10s %18s %15s %18s\n", "", "ms / step", "all-reduces / step", "MB sent / step",
                "ms in all-reduce");
    for (const auto& [label, o] : {std::pair{"all-reduce every micro", &every}, std::pair{"no_sync, reduce once", &nosync}})
      std::printf("%-24s %10.1f %18.1f %15.2f %18.2f\n", label, o->ms_per_step, o->allreduces_per_step,
                  o->mb_sent_per_step, o->ms_in_allreduce_per_step);
    std::printf("speed-up %.2fx; largest parameter difference between the two: %.2g\n",
                every.ms_per_step / nosync.ms_per_step, max_diff);
  }
  // The claims of the .md (timings vary with the machine's load; counts and values do not).
  DPLAB_CHECK(every.allreduces_per_step == g_micro && nosync.allreduces_per_step == 1,
              "expected {} and 1 all-reduces per step, got {} and {}", g_micro, every.allreduces_per_step,
              nosync.allreduces_per_step);
  DPLAB_CHECK(max_diff < 1e-5, "the two ways should give the same parameters, differ by {}", max_diff);
  par::destroy_process_group();
}

int main(int argc, char** argv) {
  if (auto exit = tutorials::parse_int_options(argc, argv, "Tutorial 11: gradient accumulation with no_sync",
                                                {{"--ranks", &g_ranks, "ranks to spawn", 1, 64},
                                                 {"--micro", &g_micro, "micro-batches per step", 1},
                                                 {"--steps", &g_steps, "optimizer steps", 1}}))
    return *exit;
  return tutorials::run_spawned("11_no_sync_accumulation", g_ranks, worker);
}
