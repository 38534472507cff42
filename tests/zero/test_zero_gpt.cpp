// test_zero_gpt.cpp: data parallelism on a transformer. A tiny GPT (tied head, LayerNorms,
// attention) trained 2 ranks x half the batch equals one process on the whole batch, as
// ToyModel does in test_ddp.cpp / test_zero.cpp: DDP with AdamW's decay groups and
// clip_grad_norm_ (tutorial 24's recipe), and ZeRO stage 1 and 2 with Adam (ZeRO's inner
// optimizer). The rows come from TextCorpus's sample_windows with RankShare, so the two ranks'
// rows together are the single process's batch. Tolerance: 2e-5 on every parameter
// (measured 6.8e-6 with AdamW and clipping, 3.6e-6 with Adam; ToyModel's is 1e-5: the GPT's
// sums are longer and Adam divides by small second moments). bf16 autocast: the loss only
// has to fall (5.54 -> 5.43 in 4 steps; its rounding is far above any parity tolerance).
// Ranks are threads (rank_harness.h). Read next: tutorials/24_tiny_gpt.cpp.
#include <doctest/doctest.h>

#include <string>

#include "datasets/text_corpus.h"
#include "framework/ops/autocast.h"
#include "framework/optim/clip_grad.h"
#include "models/gpt.h"
#include "tests/parallel/rank_harness.h"
#include "tests/zero/zero_reference.h"

using namespace dplab;
using namespace dplab::parallel;
using namespace dplab::parallel::testing;

namespace {

constexpr int kGptSteps = 4;
constexpr int64_t kBatch = 4, kBlock = 8;  // the global batch: kBatch windows of kBlock bytes

models::GPTConfig gpt_config() {
  return {.vocab_size = 256, .block_size = kBlock, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

const std::vector<uint8_t>& text() {
  static const std::vector<uint8_t> bytes = [] {
    const std::string s =
        "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
        "age of foolishness, it was the epoch of belief, it was the epoch of incredulity.";
    return std::vector<uint8_t>(s.begin(), s.end());
  }();
  return bytes;
}

const StateDict& gpt_initial_weights() {
  static StateDict sd = [] {
    manual_seed(5);
    return models::GPT(gpt_config()).state_dict();
  }();
  return sd;
}

enum class Recipe { AdamWClipped, Adam };

// kGptSteps steps on `share` of each global batch (world 1: the whole batch).
Params train_gpt(std::shared_ptr<ProcessGroup> pg, Recipe recipe, int zero_stage, bool bf16 = false,
                 std::vector<float>* losses = nullptr) {
  auto gpt = std::make_shared<models::GPT>(gpt_config());
  gpt->load_state_dict(gpt_initial_weights());
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  std::shared_ptr<nn::Module> net = gpt;
  std::unique_ptr<optim::Optimizer> opt;
  if (zero_stage) {
    opt = std::make_unique<ZeroRedundancyOptimizer>(gpt->parameters(), optim::AdamOptions{.lr = 3e-3},
                                                    ZeroOptions{.stage = zero_stage, .process_group = pg});
  } else {
    if (pg) net = std::make_shared<DistributedDataParallel>(gpt, DDPOptions{.process_group = pg});
    if (recipe == Recipe::AdamWClipped)
      opt = std::make_unique<optim::AdamW>(optim::decay_groups(*gpt, 0.1), optim::AdamWOptions{.lr = 3e-3});
    else
      opt = std::make_unique<optim::Adam>(gpt->parameters(), optim::AdamOptions{.lr = 3e-3});
  }
  Generator rng(77);  // the same on every rank: one sequence of global batches
  for (int s = 0; s < kGptSteps; ++s) {
    auto [x, y] = datasets::sample_windows(text(), rng, kBatch / world, kBlock, {rank, world});
    opt->zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(DType::BFloat16, bf16);
      loss = models::lm_loss(net->forward(x), y);
    }
    loss.backward();
    // a max_norm the gradients exceed, so the clip acts in every step
    if (recipe == Recipe::AdamWClipped) optim::clip_grad_norm_(gpt->parameters(), 0.5);
    opt->step();
    if (losses) losses->push_back(loss.item());
  }
  return params_of(*gpt);
}

}  // namespace

TEST_CASE("a tiny GPT on 2 ranks equals one process: DDP (AdamW groups, clipped), ZeRO-1 and ZeRO-2 (Adam)") {
  const Params single_adamw = train_gpt(nullptr, Recipe::AdamWClipped, 0);
  const Params single_adam = train_gpt(nullptr, Recipe::Adam, 0);
  run_threads(2, [&](ProcessGroup& pg) {
    const Params ddp = train_gpt(borrow(pg), Recipe::AdamWClipped, 0);
    const Params ddp_adam = train_gpt(borrow(pg), Recipe::Adam, 0);
    const Params zero1 = train_gpt(borrow(pg), Recipe::Adam, 1);
    const Params zero2 = train_gpt(borrow(pg), Recipe::Adam, 2);
    CHECK(max_abs_diff(ddp, single_adamw) <= 2e-5f);
    CHECK(max_abs_diff(ddp_adam, single_adam) <= 2e-5f);
    CHECK(max_abs_diff(zero1, single_adam) <= 2e-5f);
    CHECK(max_abs_diff(zero2, single_adam) <= 2e-5f);
    CHECK(max_abs_diff(zero2, ddp_adam) <= 2e-5f);
  });
  // The runs moved the weights (a parity check of runs that did nothing would pass too),
  // and the two recipes differ.
  auto initial = std::make_shared<models::GPT>(gpt_config());
  initial->load_state_dict(gpt_initial_weights());
  CHECK(max_abs_diff(single_adam, params_of(*initial)) > 1e-3f);
  CHECK(max_abs_diff(single_adam, single_adamw) > 1e-4f);
}

TEST_CASE("a tiny GPT under bf16 autocast on 2 ranks (ZeRO-2): the loss falls") {
  run_threads(2, [&](ProcessGroup& pg) {
    std::vector<float> losses;
    train_gpt(borrow(pg), Recipe::Adam, 2, /*bf16=*/true, &losses);
    REQUIRE(losses.size() == kGptSteps);
    CHECK(losses.back() < losses.front());
  });
}
