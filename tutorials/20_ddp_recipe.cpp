// Tutorial 20: the canonical DDP training program, the one to copy.
// What you will learn, in the order a DDP program does it:
//   - rendezvous from the launcher's environment (RANK, WORLD_SIZE, MASTER_*: dplab-run);
//   - DistributedSampler with set_epoch: disjoint shares, a new shuffle every epoch;
//   - DDP around the LeNet-style CNN, SGD on the averaged gradients of the GLOBAL batch
//     (--model resnet: the small ResNet, its BatchNorms made SyncBatchNorm by
//     convert_sync_batchnorm, so they normalise with the global batch's statistics);
//   - logging and a progress bar on rank 0 only; a checkpoint every epoch (rank 0 writes,
//     everyone waits) and --resume, which continues from it on every rank;
//   - distributed evaluation of the whole test set: SequentialDistributedSampler, then
//     distributed_concat puts the predictions back in dataset order;
//   - failure: a peer that dies ends every rank with a message and a non-zero exit.
// Run: dplab-run --nproc-per-node N build/tutorials/20_ddp_recipe --epochs E
//      [--batch-size 64 (global)] [--limit L] [--test-limit T] [--out DIR] [--resume]
//      [--model cnn|resnet] [--engine ring|gloo|...] (across machines: tutorial 22)
// The last line is "test accuracy: X%". Read 20_ddp_recipe.md.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <charconv>
#include <filesystem>

#include "datasets/fashion_mnist.h"
#include "framework/data/dataloader.h"
#include "framework/dplab.h"
#include "framework/io/progress.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "models/lenet.h"
#include "models/resnet.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp/sync_batch_norm.h"
#include "parallel/ddp_utils/ddp_checkpoint.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "parallel/ddp_utils/distributed_sampler.h"

using namespace dplab;
namespace par = dplab::parallel;
namespace fs = std::filesystem;

namespace {

struct Args {
  int epochs = 3;
  int64_t batch_size = 64, limit = 0, test_limit = 0;
  double lr = 0.05, momentum = 0.9, timeout_s = 60, min_accuracy = 0;
  uint64_t seed = 0;
  std::string out = "checkpoints", model = "cnn";
  std::string engine = "ring";  // dplab's ring (across machines: over gloo's wire), or gloo, ...
  bool resume = false;
  int stop_after = 0;  // > 0: stop after this epoch's checkpoint, as if interrupted
};

// Test-set accuracy of the whole set, split over the ranks; every rank gets the answer.
double evaluate(par::ProcessGroup& pg, nn::Module& model, std::shared_ptr<datasets::FashionMNIST> test, Device dev) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t n = test->size();
  auto sampler = std::make_shared<par::SequentialDistributedSampler>(n, pg.size(), pg.rank());
  data::DataLoader loader(test, {.batch_size = 500, .sampler = sampler});
  std::vector<Tensor> preds, labels;
  for (auto& batch : loader) {
    preds.push_back(argmax(model.forward(batch.data.to(dev)), 1).to(Device("cpu")));
    labels.push_back(batch.target);
  }
  // [n] in dataset order on every rank; the padding of the last block is cut off.
  auto p = par::distributed_concat(pg, cat(preds, 0), n).to_vector<int64_t>();
  auto y = par::distributed_concat(pg, cat(labels, 0), n).to_vector<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) correct += p[i] == y[i];
  model.train();
  return 100.0 * static_cast<double>(correct) / static_cast<double>(n);
}

// The checkpoint's "epoch": the epochs it has finished, a whole number >= 0.
int epoch_from(const Metadata& meta, const std::string& path) {
  auto it = meta.find("epoch");
  DPLAB_CHECK(it != meta.end(), "--resume: {} has no \"epoch\" in its metadata (was it saved by "
              "this tutorial?)", path);
  int epoch = -1;
  const std::string& v = it->second;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), epoch);
  DPLAB_CHECK(!v.empty() && ec == std::errc() && end == v.data() + v.size() && epoch >= 0,
              "--resume: {} has epoch=\"{}\" in its metadata; expected a whole number >= 0 (the "
              "epochs it finished)", path, v.substr(0, 64));
  return epoch;
}

int run(const Args& a) {
  // 1. Rendezvous. dplab-run sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT.
  set_num_threads(1);  // one process per core: N processes with N threads each would fight
  par::init_process_group({.engine = a.engine, .timeout = par::Seconds(a.timeout_s)});
  par::ProcessGroup& pg = par::default_process_group();
  const int rank = pg.rank(), world = pg.size();
  const par::RankInfo info = par::rank_info_from_env();
  const Device dev(DeviceKind::CPU, info.local_rank);  // cuda:local_rank on a GPU box
  DPLAB_CHECK(a.batch_size % world == 0, "--batch-size {} (the global batch) must divide by the {} ranks",
              a.batch_size, world);
  const int64_t per_rank = a.batch_size / world;

  // 2. Data: every rank opens the set; the sampler gives each its share.
  auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = a.limit});
  auto test = std::make_shared<datasets::FashionMNIST>("test", datasets::FashionMNISTOptions{.limit = a.test_limit});
  auto sampler = std::make_shared<par::DistributedSampler>(train->size(), world, rank,
                                                           par::DistributedSamplerOptions{.seed = a.seed});
  data::DataLoader loader(train, {.batch_size = per_rank, .sampler = sampler});

  // 3. Model, DDP (broadcasts rank 0's weights), optimizer.
  manual_seed(a.seed);
  std::shared_ptr<nn::Module> model = std::make_shared<models::LeNet>();
  if (a.model == "resnet") model = par::convert_sync_batchnorm(std::make_shared<models::ResNet>());
  model->to(dev);
  par::DistributedDataParallel ddp(model, {.device = dev});
  optim::SGD opt(ddp.parameters(), {.lr = a.lr, .momentum = a.momentum});
  // Cosine annealing per step, down to 0 at the last step: the final weights settle, so two
  // runs that differ only in float rounding (1 rank vs N) end at the same accuracy.
  const int64_t steps_per_epoch = (sampler->size() + per_rank - 1) / per_rank;
  optim::CosineAnnealingLR sched(opt, {.t_max = a.epochs * steps_per_epoch});
  if (rank == 0)
    fmt::print("{} ranks, global batch {} ({} per rank), {} training / {} test images\n", world, a.batch_size,
               per_rank, train->size(), test->size());

  // 4. Resume: every rank loads rank 0's last checkpoint onto its own device.
  const std::string ckpt = (fs::path(a.out) / "ddp_recipe.safetensors").string();
  int start = 0;
  if (a.resume) {
    DPLAB_CHECK(fs::exists(ckpt), "--resume: no checkpoint at {} (run without --resume first)", ckpt);
    const Metadata meta = par::load_checkpoint_on_all_ranks(pg, ckpt, ddp, &opt);
    start = epoch_from(meta, ckpt);
    sched.set_last_epoch(start * steps_per_epoch);  // the schedule is a function of the step
    if (rank == 0) fmt::print("resumed from {} after epoch {}\n", ckpt, start);
    if (start >= a.epochs && rank == 0)
      fmt::print("nothing to train: the checkpoint is after epoch {} and --epochs is {} (raise "
                 "--epochs to train on)\n", start, a.epochs);
  }
  if (rank == 0) fs::create_directories(a.out);

  for (int epoch = start; epoch < a.epochs; ++epoch) {
    sampler->set_epoch(epoch);  // without it every epoch repeats epoch 0's order
    loader.set_epoch(epoch);
    ProgressBar bar({.total = rank == 0 ? sampler->total_size() : 0,
                     .desc = fmt::format("epoch {}/{}", epoch + 1, a.epochs), .unit = "samples",
                     .mode = rank == 0 ? ProgressMode::Auto : ProgressMode::Off});
    double loss_sum = 0;
    int64_t batches = 0;
    for (auto& batch : loader) {
      opt.zero_grad();
      Tensor loss = cross_entropy(ddp.forward(batch.data.to(dev)), batch.target.to(dev));
      loss.backward();  // averages the gradients over the ranks, bucket by bucket
      opt.step();
      sched.step();
      loss_sum += loss.item();
      ++batches;
      bar.update(batch.data.size(0) * world, {{"loss", loss_sum / static_cast<double>(batches)}});
    }
    bar.close();
    // Mean training loss over all ranks' batches: one all_reduce of 2 numbers.
    Tensor stats = from_vector(std::vector<float>{static_cast<float>(loss_sum), static_cast<float>(batches)}, {2});
    pg.all_reduce(stats);
    par::save_checkpoint_on_rank0(pg, ckpt, ddp, &opt, {{"epoch", std::to_string(epoch + 1)}});
    if (rank == 0)
      fmt::print("epoch {}: train loss {:.4f}, checkpoint {}\n", epoch + 1,
                 stats.to_vector<float>()[0] / stats.to_vector<float>()[1], ckpt);
    if (epoch + 1 == a.stop_after) {
      if (rank == 0) fmt::print("stopped after epoch {} (--stop-after); continue with --resume\n", epoch + 1);
      par::destroy_process_group();
      return 0;
    }
  }

  const double acc = evaluate(pg, *model, test, dev);
  if (rank == 0) fmt::print("test accuracy: {:.2f}%\n", acc);
  par::destroy_process_group();
  return acc >= a.min_accuracy ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 20: the canonical DDP recipe (launch with dplab-run)"};
  Args a;
  app.add_option("--epochs", a.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", a.batch_size, "the GLOBAL batch, split over the ranks")->check(CLI::PositiveNumber);
  app.add_option("--limit", a.limit, "use only the first N training images (0: all 60000)");
  app.add_option("--test-limit", a.test_limit, "use only the first N test images (0: all 10000)");
  app.add_option("--model", a.model, "cnn (LeNet-style) or resnet (with SyncBatchNorm)")
      ->check(CLI::IsMember({"cnn", "resnet"}));
  app.add_option("--engine", a.engine, "ring (default), star, auto, ... (dplab's own; across machines over "
                 "gloo's wire) or gloo, mpi (tutorial 22)")
      ->check(CLI::IsMember({"ring", "star", "recursive_doubling", "halving_doubling", "auto", "gloo", "mpi"}));
  app.add_option("--lr", a.lr);
  app.add_option("--momentum", a.momentum);
  app.add_option("--seed", a.seed, "initial weights and the sampler's shuffle (same on every rank)");
  app.add_option("--out", a.out, "directory of the per-epoch checkpoint ddp_recipe.safetensors");
  app.add_flag("--resume", a.resume, "continue from the checkpoint in --out (same --epochs: the lr schedule "
               "spans them)");
  app.add_option("--min-accuracy", a.min_accuracy, "exit 1 if the test accuracy (%) is below this");
  app.add_option("--stop-after", a.stop_after, "stop after this epoch's checkpoint, as if interrupted");
  app.add_option("--timeout", a.timeout_s, "seconds a collective waits for a peer before failing")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    // A dead peer ends here too (CommError naming it): say so, exit non-zero, and the
    // launcher stops the other ranks.
    fmt::print(stderr, "20_ddp_recipe: rank {}: {}\n", std::getenv("RANK") ? std::getenv("RANK") : "?", e.what());
    return 1;
  }
}
