// Tutorial 12: evaluation split over ranks that returns exactly what one process returns.
// What you will learn:
//   - SequentialDistributedSampler: rank r evaluates a contiguous block of the test set,
//     padded so every rank has the same count (10,000 on 3 ranks: 3334 each, 2 are padding);
//   - distributed_concat: all_gather the blocks, concatenate in rank order, cut the padding:
//     the predictions come back in dataset order, identical to a single process's;
//   - metric averaging weighted by real example counts (WeightedMetrics), because the mean
//     of the ranks' means is wrong when a rank holds padding or a smaller shard.
// Run: 12_distributed_eval [--nproc N] [--limit L] [--train T]   (default 3 ranks, the whole
// test set, after one epoch on 3000 training images)
// Read 12_distributed_eval.md.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>

#include "datasets/fashion_mnist.h"
#include "framework/data/dataloader.h"
#include "framework/dplab.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"
#include "parallel/comm/init.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "parallel/ddp_utils/distributed_sampler.h"
#include "parallel/launch/spawn.h"
#include "tutorials/train_common.h"

using namespace dplab;
namespace par = dplab::parallel;

namespace {

int64_t g_limit = 0;  // 0: the whole test set
int64_t g_train = 3000;  // training images for the short training before evaluation
constexpr int64_t kBatch = 250;

// Every rank builds and trains the same model the same way (fixed seed, one thread, so the
// replicas are bit-identical): one epoch on the first g_train images, seconds. A real
// program trains with DDP (tutorial 20) or loads a checkpoint (tutorial 09).
std::shared_ptr<models::MLP> make_model() {
  set_num_threads(1);
  manual_seed(0);
  auto m = std::make_shared<models::MLP>();
  auto train = std::make_shared<datasets::FashionMNIST>("train", datasets::FashionMNISTOptions{.limit = g_train});
  data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 0});
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (auto& batch : loader) {
    opt.zero_grad();
    cross_entropy(m->forward(batch.data), batch.target).backward();
    opt.step();
  }
  m->eval();
  return m;
}

struct Predictions {
  Tensor logits;  // [n, 10]
  Tensor labels;  // [n] int64, argmax of logits
};

// Forward over `loader`, keeping logits and argmax in loader order. Metrics count only the
// first `real` rows: rows past it are SequentialDistributedSampler's padding.
Predictions predict(nn::Module& model, data::DataLoader& loader, int64_t real, par::WeightedMetrics* metrics) {
  NoGradGuard no_grad;
  std::vector<Tensor> logits, labels;
  int64_t seen = 0;
  for (auto& batch : loader) {
    Tensor out = model.forward(batch.data);
    logits.push_back(out);
    labels.push_back(argmax(out, 1));
    const int64_t b = batch.data.size(0), keep = std::clamp<int64_t>(real - seen, 0, b);
    if (metrics && keep > 0) {
      Tensor o = out.narrow(0, keep), y = batch.target.narrow(0, keep);
      metrics->add("loss", cross_entropy(o, y).item(), keep);
      auto pred = argmax(o, 1).to_vector<int64_t>(), truth = y.to_vector<int64_t>();
      int64_t correct = 0;
      for (size_t i = 0; i < pred.size(); ++i) correct += (pred[i] == truth[i]);
      metrics->add("accuracy", static_cast<double>(correct) / static_cast<double>(keep), keep);
    }
    seen += b;
  }
  return {cat(logits, 0), cat(labels, 0)};
}

void evaluate(int rank) {
  par::init_process_group({.engine = "ring"});
  par::ProcessGroup& pg = par::default_process_group();
  auto test = std::make_shared<datasets::FashionMNIST>("test", datasets::FashionMNISTOptions{.limit = g_limit});
  const int64_t n = test->size();
  auto model = make_model();

  // 1. This rank's block, padded to the common length m = ceil(n / world).
  auto sampler = std::make_shared<par::SequentialDistributedSampler>(n, pg.size(), rank);
  data::DataLoader loader(test, {.batch_size = kBatch, .sampler = sampler});
  par::WeightedMetrics metrics;
  Predictions mine = predict(*model, loader, sampler->num_real(), &metrics);
  fmt::print("rank {}: {} examples ({} real, {} padding), local accuracy {:.4f}\n", rank,
             sampler->size(), sampler->num_real(), sampler->size() - sampler->num_real(),
             sampler->num_real() ? metrics.local("accuracy") : 0.0);

  // 2. Gather all blocks in rank order and cut the padding: [n] in dataset order.
  Tensor all_labels = par::distributed_concat(pg, mine.labels, n);
  Tensor all_logits = par::distributed_concat(pg, mine.logits, n);
  auto avg = metrics.reduce(pg);  // collective: every rank calls it

  if (rank == 0) {
    // 3. The single-process reference, computed here on rank 0 alone.
    data::DataLoader whole(test, {.batch_size = kBatch});
    par::WeightedMetrics single;
    Predictions ref = predict(*model, whole, n, &single);
    auto a = all_labels.to_vector<int64_t>(), b = ref.labels.to_vector<int64_t>();
    int64_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += (a[i] == b[i]);
    const float logit_diff = max(abs(all_logits - ref.logits)).item();
    fmt::print("gathered {} predictions on {} ranks; equal to one process: {} of {}, "
               "max |logit difference| {}\n", a.size(), pg.size(), same, n, logit_diff);
    fmt::print("metrics averaged over ranks: loss {:.6f} accuracy {:.6f} ({} examples)\n",
               avg.at("loss"), avg.at("accuracy"), metrics.global_count(pg, "loss"));
    fmt::print("metrics of one process:      loss {:.6f} accuracy {:.6f}\n", single.local("loss"),
               single.local("accuracy"));
    DPLAB_CHECK(static_cast<int64_t>(a.size()) == n && same == n, "{} of {} predictions differ", n - same, n);
    DPLAB_CHECK(std::abs(avg.at("accuracy") - single.local("accuracy")) < 1e-6 &&
                    std::abs(avg.at("loss") - single.local("loss")) < 1e-4,
                "averaged metrics differ from the single-process ones");
  } else {
    metrics.global_count(pg, "loss");  // the matching collective of rank 0's print
  }
  par::destroy_process_group();
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 3;
  if (auto exit = tutorials::parse_int_options(
          argc, argv, "Tutorial 12: distributed evaluation that equals one process",
          {{"--nproc", &nproc, "ranks to spawn", 1, 64},
           {"--limit", &g_limit, "evaluate only the first L test images (0: all 10000)"},
           {"--train", &g_train, "training images for the short training first", 1}}))
    return *exit;
  try {
    // Check the data before starting ranks: without it the tutorial is skipped (exit 77).
    datasets::FashionMNIST probe("test", {.limit = 1});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "12_distributed_eval: skipped, no Fashion-MNIST: %s\n", e.what());
    return 77;
  }
  return tutorials::run_spawned("12_distributed_eval", nproc, evaluate);
}
