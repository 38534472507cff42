// Tutorial 21: DDP's knobs, measured on the MLP and Fashion-MNIST.
// What you will learn:
//   1. bucket_cap_mb: step time against bucket size on emulated links (CSV + PNG): small
//      buckets pay a latency per all-reduce, one big bucket cannot overlap with backward;
//   2. find_unused_parameters: a model with an unused branch, found by walking the graph
//      after forward, its buckets still go out during backward;
//   3. gradient_as_bucket_view: .grad as a view of the bucket saves one gradient copy;
//   4. fp16_compress_hook: half the traffic, the same accuracy to a fraction of a point;
//   5. the same training five ways: DataParallel, DDP started by spawn and by dplab-run,
//      Horovod style; mixed precision is not in dplab yet.
// Run: 21_ddp_knobs [--ranks 2] [--link-gbps 0.1] [--steps 30] [--out results/21_ddp_knobs]
// Read 21_ddp_knobs.md.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "benchmarks/plot_runner.h"
#include "datasets/fashion_mnist.h"
#include "framework/dplab.h"
#include "framework/optim/sgd.h"
#include "models/lenet.h"
#include "models/mlp.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/compression.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/horovod/horovod.h"
#include "parallel/launch/spawn.h"

using namespace dplab;
namespace par = dplab::parallel;
namespace fs = std::filesystem;

namespace {

int g_ranks = 2, g_steps = 30;
double g_gbps = 0.1;
std::string g_out = "results/21_ddp_knobs";
constexpr int64_t kGlobal = 64, kTrain = 6400;

// Median wall time of one step in ms, after 3 warm-up steps (allocations, bucket rebuild).
double median_step_ms(int steps, const std::function<void(int)>& step) {
  std::vector<double> ms;
  for (int s = 0; s < steps + 3; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    step(s);
    if (s >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Step s's rows for `rank` of `world`: a global batch of kGlobal images, split in order.
std::pair<Tensor, Tensor> rows(const datasets::FashionMNIST& d, int s, int rank, int world) {
  const int64_t per = kGlobal / world, start = (s * kGlobal) % (d.size() - kGlobal) + rank * per;
  return {d.data().narrow(start, per), d.targets().narrow(start, per)};
}

// One training step of a DDP model (or any module) on this rank's rows.
void step(nn::Module& m, optim::SGD& opt, const datasets::FashionMNIST& d, int s, int rank, int world) {
  auto [x, y] = rows(d, s, rank, world);
  opt.zero_grad();
  cross_entropy(m.forward(x), y).backward();
  opt.step();
}

std::shared_ptr<models::MLP> mlp() {
  manual_seed(0);
  return std::make_shared<models::MLP>();
}

// The MLP plus a second head that forward never calls: a model with an unused branch.
struct TwoHeads : nn::Module {
  std::shared_ptr<models::MLP> body = register_module("body", mlp());
  std::shared_ptr<nn::Linear> other_head = register_module("other_head", std::make_shared<nn::Linear>(784, 10));
  Tensor forward(const Tensor& x) override { return body->forward(x); }
};

void append(const std::string& file, const std::string& line) { std::ofstream(g_out + "/" + file, std::ios::app) << line; }

// What every section of a spawned rank works with.
struct Rank {
  int rank, world;
  par::ProcessGroup& pg;
  datasets::FashionMNIST train{"train", {.limit = kTrain}}, test{"test", {.limit = 2000}};
  void say(const std::string& s) const {  // rank 0 talks
    if (rank == 0) fmt::print("{}", s), std::fflush(stdout);
  }
};

void bucket_sweep(Rank& r) {
  const int rank = r.rank, world = r.world;
  auto& train = r.train;
  auto say = [&](const std::string& s) { r.say(s); };
  // The CNN: its big gradients (fc, conv2) are final early and conv2's backward is long,
  // so their all-reduce can hide behind it; the MLP's big fc1.weight comes last and cannot.
  say(fmt::format("== 1. bucket_cap_mb: the CNN on {} ranks, emulated {} Gbit/s links ==\n", world, g_gbps));
  say(fmt::format("{:>10} {:>8} {:>10}\n", "cap MB", "buckets", "step ms"));
  if (rank == 0) std::ofstream(g_out + "/bucket_sweep.csv") << "bucket_cap_mb,buckets,step_ms\n";
  // 0.116 MB of gradients. Three rounds over the caps, the best median of each cap kept: a
  // busy machine only ever makes a step slower. Round 0 starts with an unrecorded warm-up.
  const std::vector<double> caps{0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 25.0};
  std::vector<double> best(caps.size(), 1e30);
  std::vector<size_t> nbuckets(caps.size());
  for (int round = 0; round < 3; ++round)
    for (size_t c = (round == 0 ? 0 : 1); c <= caps.size(); ++c) {  // c = 0: the warm-up
      manual_seed(0);
      auto m = std::make_shared<models::LeNet>();
      par::DistributedDataParallel ddp(m, {.bucket_cap_mb = c == 0 ? 25.0 : caps[c - 1]});
      optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
      double ms = median_step_ms(g_steps, [&](int s) { step(ddp, opt, train, s, rank, world); });
      if (c == 0) continue;
      best[c - 1] = std::min(best[c - 1], ms);
      nbuckets[c - 1] = ddp.reducer().num_buckets();
    }
  for (size_t c = 0; c < caps.size(); ++c) {
    say(fmt::format("{:>10} {:>8} {:>10.2f}\n", caps[c], nbuckets[c], best[c]));
    if (rank == 0) append("bucket_sweep.csv", fmt::format("{},{},{:.3f}\n", caps[c], nbuckets[c], best[c]));
  }

}

void unused_branch(Rank& r) {
  r.say("\n== 2. find_unused_parameters: a second head that forward never calls ==\n");
  auto m = std::make_shared<TwoHeads>();
  // Registered before DDP's own hook, so it sees the count before DDP handles fc1.weight,
  // the last gradient of backward.
  const par::Reducer* reducer = nullptr;
  int64_t before_last = -1;
  m->body->parameters()[0].register_post_accumulate_grad_hook(
      [&](Tensor&) { before_last = reducer->reductions_launched(); });
  par::DistributedDataParallel ddp(m, {.bucket_cap_mb = 0.25, .find_unused_parameters = true});
  reducer = &ddp.reducer();
  auto [x, y] = rows(r.train, 0, r.rank, r.world);
  Tensor out = ddp.forward(x);
  std::string names;
  for (size_t p : reducer->unused_parameters()) names += " " + ddp.module().named_parameters()[p].first;
  cross_entropy(out, y).backward();
  r.say(fmt::format("graph walk after forward, before backward: unused{}\n", names));
  r.say(fmt::format("{} of {} all-reduces had started before backward's last gradient (fc1.weight)\n",
                    before_last, reducer->num_buckets()));
  DPLAB_CHECK(reducer->unused_parameters().size() == 2 && before_last >= 1,
              "expected other_head's 2 tensors found unused and bucket 0 out early, got {} and {}",
              reducer->unused_parameters().size(), before_last);
}

void bucket_view_memory(Rank& r) {
  const int rank = r.rank, world = r.world;
  auto& train = r.train;
  auto say = [&](const std::string& s) { r.say(s); };
  say("\n== 3. gradient_as_bucket_view: memory of a step (MB) ==\n");
  say(fmt::format("  {:<26} {:>8} {:>22}\n", "", "peak", "held after backward"));
  int64_t held_by[2] = {0, 0};
  for (bool view : {false, true}) {
    const Device dev(DeviceKind::CPU, rank + 1);  // a device of its own (the data sit on cpu:0)
    auto m = mlp();
    m->to(dev);
    par::DistributedDataParallel ddp(m, {.device = dev, .gradient_as_bucket_view = view});
    optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
    int64_t held = 0;
    for (int s = 0; s < 3; ++s) {  // step 3 is measured: optimizer state and buckets exist
      if (s == 2) reset_peak_memory_stats(dev);
      auto [x, y] = rows(train, s, rank, world);
      opt.zero_grad(/*set_to_none=*/!view);  // with views: zero in place, keep the views
      cross_entropy(ddp.forward(x.to(dev)), y.to(dev)).backward();
      held = memory_stats(dev).allocated_bytes;
      opt.step();
    }
    say(fmt::format("  gradient_as_bucket_view={:<5} {:>8.3f} {:>22.3f}\n", view,
                    memory_stats(dev).peak_bytes / 1e6, held / 1e6));
    held_by[view] = held;
  }
  DPLAB_CHECK(held_by[0] - held_by[1] == 235146 * 4, "bucket views should hold one gradient copy (940584 B) "
              "less after backward, held {} B less", held_by[0] - held_by[1]);

}

void fp16_hook(Rank& r) {
  const int rank = r.rank, world = r.world;
  auto &train = r.train, &test = r.test;
  auto& pg = r.pg;
  auto say = [&](const std::string& s) { r.say(s); };
  say(fmt::format("\n== 4. fp16_compress_hook vs none: {} steps, test accuracy on 2000 images ==\n", 4 * g_steps));
  double kb_by[2] = {0, 0};
  for (bool fp16 : {false, true}) {
    auto m = mlp();
    par::DistributedDataParallel ddp(m, {.comm_hook = fp16 ? par::fp16_compress_hook() : par::CommHook{}});
    optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
    pg.reset_comm_stats();
    for (int s = 0; s < 4 * g_steps; ++s) step(ddp, opt, train, s, rank, world);
    const double kb = pg.comm_stats().per_collective["all_reduce"].bytes_sent / 1024.0 / (4 * g_steps);
    NoGradGuard no_grad;
    Tensor pred = argmax(m->forward(test.data()), 1).to(DType::Float32);
    const double acc = 100.0 * sum(eq(pred, test.targets().to(DType::Float32))).item() / test.size();
    say(fmt::format("  {:<6} {:>8.1f} KB sent per step per rank, test accuracy {:.2f}%\n", fp16 ? "fp16" : "none",
                    kb, acc));
    kb_by[fp16] = kb;
  }
  DPLAB_CHECK(kb_by[1] * 2 == kb_by[0], "fp16 should send half the bytes: {} vs {} KB", kb_by[1], kb_by[0]);

}

// 5. Two of the ways: DDP here (started by spawn) and Horovod's API on the same group.
void spawned_ways(Rank& r) {
  const int rank = r.rank, world = r.world;
  auto& train = r.train;
  auto m = mlp();
  par::DistributedDataParallel ddp(m);
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  double ddp_ms = median_step_ms(g_steps, [&](int s) { step(ddp, opt, train, s, rank, world); });
  par::hvd::init();  // joins the existing default group
  auto hm = mlp();
  auto sgd = std::make_shared<optim::SGD>(hm->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  par::hvd::DistributedOptimizer hopt(sgd, hm->named_parameters());
  double hvd_ms = median_step_ms(g_steps, [&](int s) {
    auto [x, y] = rows(train, s, rank, world);
    hopt.zero_grad();
    cross_entropy(hm->forward(x), y).backward();
    hopt.step();
  });
  if (rank == 0) append("ways.csv", fmt::format("DDP started by spawn,{:.3f}\nHorovod style,{:.3f}\n", ddp_ms, hvd_ms));
}

void knobs(int rank) {
  set_num_threads(1);
  par::init_process_group({.engine = "ring", .timeout = par::Seconds(120.0), .link_gbps = g_gbps});
  Rank r{.rank = rank, .world = par::get_world_size(), .pg = par::default_process_group()};
  bucket_sweep(r);
  unused_branch(r);
  bucket_view_memory(r);
  fp16_hook(r);
  spawned_ways(r);
  par::destroy_process_group();
}

// The same DDP run, started by dplab-run (this program in its --dplab-run-worker mode).
void dplab_run_worker() {
  set_num_threads(1);
  par::init_process_group({.engine = "ring", .timeout = par::Seconds(120.0), .link_gbps = g_gbps});
  const int rank = par::get_rank(), world = par::get_world_size();
  datasets::FashionMNIST train("train", {.limit = kTrain});
  auto m = mlp();
  par::DistributedDataParallel ddp(m);
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  double ms = median_step_ms(g_steps, [&](int s) { step(ddp, opt, train, s, rank, world); });
  if (rank == 0) append("ways.csv", fmt::format("DDP started by dplab-run,{:.3f}\n", ms));
  par::destroy_process_group();
}

double data_parallel_ms() {
  set_num_threads(1);
  datasets::FashionMNIST train("train", {.limit = kTrain});
  std::vector<Device> devs;
  for (int r = 0; r < g_ranks; ++r) devs.emplace_back(DeviceKind::CPU, r);
  auto dp = std::make_shared<par::DataParallel>(mlp(), devs);
  dp->emulate_links(g_gbps);
  optim::SGD opt(dp->parameters(), {.lr = 0.05, .momentum = 0.9});
  return median_step_ms(g_steps, [&](int s) { step(*dp, opt, train, s, 0, 1); });  // the whole global batch
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 21: DDP's knobs, measured"};
  bool worker = false;
  app.add_option("--ranks", g_ranks, "processes (and DataParallel devices)")->check(CLI::Range(2, 8));
  app.add_option("--link-gbps", g_gbps, "emulated link per rank / device, Gbit/s (0: none)");
  app.add_option("--steps", g_steps, "timed steps per measurement (median)")->check(CLI::PositiveNumber);
  app.add_option("--out", g_out, "directory for bucket_sweep.csv, bucket_sweep.png, ways.csv");
  app.add_flag("--dplab-run-worker", worker)->group("");  // internal: started by dplab-run
  CLI11_PARSE(app, argc, argv);
  try {
    if (worker) return dplab_run_worker(), 0;
    if (!par::is_spawned_child()) {
      fs::create_directories(g_out);
      std::ofstream(g_out + "/ways.csv") << "way,step_ms\n";
    }
    par::spawn(knobs, g_ranks);
    const std::string self = fs::canonical("/proc/self/exe").string();
    const std::string cmd = fmt::format("'{}' --nproc-per-node {} '{}' --dplab-run-worker --link-gbps {} --steps {} --out '{}'",
                                        DPLAB_RUN_EXE, g_ranks, self, g_gbps, g_steps, g_out);
    DPLAB_CHECK(std::system(cmd.c_str()) == 0, "the dplab-run launch failed: {}", cmd);
    append("ways.csv", fmt::format("DataParallel (threads),{:.3f}\n", data_parallel_ms()));

    fmt::print("\n== 5. One training, five ways: MLP, global batch {}, {} devices, {} Gbit/s links ==\n", kGlobal,
               g_ranks, g_gbps);
    std::ifstream in(g_out + "/ways.csv");
    std::string line;
    std::getline(in, line);  // header
    fmt::print("{:<28} {:>9} {:>10}\n", "way", "step ms", "samples/s");
    while (std::getline(in, line)) {
      auto comma = line.rfind(',');
      double ms = std::stod(line.substr(comma + 1));
      fmt::print("{:<28} {:>9.2f} {:>10.0f}\n", line.substr(0, comma), ms, kGlobal / ms * 1000);
    }
    fmt::print("{:<28} {:>9} {:>10}   (no float16 autocast in dplab yet)\n", "mixed precision", "-", "-");
    const dplab::bench::PlotRun plot = dplab::bench::run_plot_script(DPLAB_KNOBS_PLOT, {g_out});
    if (!plot.ok) fmt::print("(no plot: {})\n", plot.note);
    fmt::print("wrote {}/bucket_sweep.csv, bucket_sweep.png, ways.csv\n", g_out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "21_ddp_knobs: {}\n", e.what());
    return 1;
  }
  return 0;
}
