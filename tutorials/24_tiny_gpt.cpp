// Tutorial 24: a tiny GPT learns English byte by byte, on a CPU, in minutes.
// What you will learn:
//   - the pieces of GPT training as nanoGPT puts them together: a byte-level corpus (the
//     Jargon File, vocabulary 256), random windows as batches, AdamW with decay groups
//     (matrices decay, vectors do not), clip_grad_norm_ at 1.0, a warm-up + cosine lr;
//   - how to read the loss: the unigram entropy of the text is what a model without context
//     reaches; the validation loss far below it is what attention learned;
//   - sampling: the same prompt before and after training (temperature 0.8, top-k 40);
//   - the model saved as safetensors (its tied head stored as two equal copies) and loaded
//     back by --generate;
//   - the same training on N ranks: DDP, or ZeRO stage 2, and bf16 autocast.
// Run: 24_tiny_gpt [--steps N] [--data FILE] [--out DIR] [--bf16]
//      dplab-run --nproc-per-node 2 build/tutorials/24_tiny_gpt [--zero 2] [--bf16]
//      24_tiny_gpt --generate [--prompt TEXT] [--out DIR]
// Writes DIR/loss.csv, DIR/loss.png (with matplotlib) and DIR/tiny_gpt.safetensors.
// Read 24_tiny_gpt.md.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>

#include "benchmarks/plot_runner.h"
#include "datasets/text_corpus.h"
#include "framework/dplab.h"
#include "framework/io/progress.h"
#include "framework/ops/autocast.h"
#include "framework/optim/adam.h"
#include "framework/optim/clip_grad.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/param_groups.h"
#include "models/gpt_sample.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/zero/zero_redundancy_optimizer.h"

using namespace dplab;
namespace par = dplab::parallel;
namespace fs = std::filesystem;

namespace {

struct Args {
  int64_t steps = 1000, batch = 16, block = 128, n_layer = 4, n_head = 4, n_embd = 128;
  double lr = 4e-3, min_lr = 4e-4, weight_decay = 0.1;
  int64_t warmup = 50, eval_every = 100, eval_batches = 8;
  uint64_t seed = 1337;
  std::string data, out = "results/24_tiny_gpt", prompt = "The hacker ";
  int zero = 0, threads = 1;
  bool bf16 = false, generate = false;
  int64_t sample_tokens = 200;
  double max_val_ratio = 0;  // > 0: exit 1 when the final val loss > this x the unigram entropy
};

void print_sample(models::GPT& gpt, const Args& a, const std::string& when) {
  Generator rng(a.seed);
  auto ids = models::generate(gpt, models::bytes_to_ids(a.prompt),
                              {.max_new_tokens = a.sample_tokens, .temperature = 0.8, .top_k = 40}, rng);
  std::string text = models::ids_to_bytes(ids);
  for (char& c : text)  // control bytes (an untrained model draws them) would drive the terminal
    if ((static_cast<unsigned char>(c) < 32 && c != '\n' && c != '\t') || c == 127) c = '.';
  fmt::print("---- sample {} (temperature 0.8, top-k 40) ----\n{}\n----\n", when, text);
}

// Mean loss over eval_batches fixed validation batches (the same windows every time), each
// rank its share of every batch; one all_reduce of two numbers.
double evaluate(models::GPT& gpt, const datasets::TextCorpus& corpus, const Args& a, par::ProcessGroup* pg) {
  NoGradGuard no_grad;
  gpt.eval();
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  Generator rng(a.seed + 1);
  double sum = 0;
  for (int64_t i = 0; i < a.eval_batches; ++i) {
    auto [x, y] = corpus.sample_batch(datasets::TextSplit::Val, rng, a.batch / world, a.block, {rank, world});
    amp::AutocastGuard autocast(DType::BFloat16, a.bf16);
    sum += gpt.loss(x, y).item();
  }
  gpt.train();
  if (!pg) return sum / static_cast<double>(a.eval_batches);
  Tensor t = from_vector(std::vector<float>{static_cast<float>(sum)}, {1});
  pg->all_reduce(t);
  return t.to_vector<float>()[0] / static_cast<double>(a.eval_batches * world);
}

void write_plot(const std::string& out) {
  // the first python3 with matplotlib ($DPLAB_PYTHON first), as every plotting program finds it
  const dplab::bench::PlotRun plot = dplab::bench::run_plot_script(DPLAB_GPT_PLOT, {out});
  fmt::print("{}\n", plot.ok ? fmt::format("wrote {}/loss.png", out) : "(no plot: " + plot.note + ")");
}

int train(const Args& a) {
  // Ranks: started by dplab-run (RANK set) or alone. One thread per rank when there are several.
  const bool distributed = std::getenv("RANK") != nullptr;
  std::shared_ptr<par::ProcessGroup> pg;
  if (distributed) pg = par::init_process_group();
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  set_num_threads(distributed ? 1 : a.threads);
  DPLAB_CHECK(a.batch % world == 0, "--batch {} (the global batch) must divide by the {} ranks", a.batch, world);
  DPLAB_CHECK(a.zero == 0 || distributed, "--zero {} needs ranks: launch with dplab-run", a.zero);
  const bool talk = rank == 0;

  datasets::TextCorpus corpus({.path = a.data});
  const double entropy = datasets::unigram_entropy(corpus.val());
  manual_seed(a.seed);  // the same initial weights on every rank
  auto gpt = std::make_shared<models::GPT>(models::GPTConfig{
      .vocab_size = 256, .block_size = a.block, .n_layer = a.n_layer, .n_head = a.n_head, .n_embd = a.n_embd});
  if (talk) {
    fmt::print("corpus {}: {} train / {} val bytes; unigram entropy of val {:.3f} nats (target: val loss <= "
               "0.6 x = {:.3f})\n", corpus.path(), corpus.train().size(), corpus.val().size(), entropy, 0.6 * entropy);
    fmt::print("GPT: {} layers, {} heads, {} channels, block {}: {} parameters ({} without wpe); {}, global batch "
               "{} x {} bytes{}\n", a.n_layer, a.n_head, a.n_embd, a.block, gpt->num_params(), gpt->num_params(true),
               world == 1 ? "1 process" : fmt::format("{} ranks, {}", world, a.zero ? fmt::format("ZeRO-{}", a.zero) : "DDP"),
               a.batch, a.block, a.bf16 ? ", bf16 autocast" : "");
    print_sample(*gpt, a, "before training");
  }

  // What trains: the model itself, or DDP around it; AdamW with decay groups, or ZeRO's
  // sharded Adam (its inner optimizer has one group and L2 decay, so none here).
  std::shared_ptr<nn::Module> net = gpt;
  std::unique_ptr<optim::Optimizer> opt;
  if (a.zero) {
    opt = std::make_unique<par::ZeroRedundancyOptimizer>(
        gpt->parameters(), optim::AdamOptions{.lr = a.lr, .betas = {0.9, 0.99}},
        par::ZeroOptions{.stage = a.zero, .process_group = pg});
  } else {
    if (pg) net = std::make_shared<par::DistributedDataParallel>(gpt, par::DDPOptions{.process_group = pg});
    auto groups = optim::decay_groups(*gpt, a.weight_decay);  // {matrices: wd}, {vectors: 0}
    if (talk) {
      int64_t n[2] = {0, 0};
      for (int g = 0; g < 2; ++g)
        for (const Tensor& p : groups[g].params) n[g] += p.numel();
      fmt::print("AdamW groups: {} tensors ({} parameters) decay {}, {} tensors ({}) do not\n",
                 groups[0].params.size(), n[0], a.weight_decay, groups[1].params.size(), n[1]);
    }
    opt = std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = a.lr, .betas = {0.9, 0.99}});
  }
  optim::WarmupCosineLR sched(*opt, {.warmup_steps = std::min(a.warmup, a.steps - 1), .total_steps = a.steps, .min_lr = a.min_lr});

  fs::create_directories(a.out);
  std::FILE* csv = talk ? std::fopen((fs::path(a.out) / "loss.csv").c_str(), "w") : nullptr;
  DPLAB_CHECK(!talk || csv, "cannot write {}/loss.csv", a.out);
  if (csv) fmt::print(csv, "step,seconds,lr,train_loss,val_loss\n");
  Generator rng(a.seed);  // the same on every rank: each keeps its rows of one global batch
  ProgressBar bar({.total = talk ? a.steps : 0, .desc = "train", .unit = "steps",
                   .mode = talk ? ProgressMode::Auto : ProgressMode::Off});
  const auto start = std::chrono::steady_clock::now();
  double val = 0, grad_norm = 0;
  for (int64_t step = 1; step <= a.steps; ++step) {
    auto [x, y] = corpus.sample_batch(datasets::TextSplit::Train, rng, a.batch / world, a.block, {rank, world});
    opt->zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(DType::BFloat16, a.bf16);  // off unless --bf16
      loss = models::lm_loss(net->forward(x), y);
    }
    loss.backward();  // DDP: averaged over the ranks; ZeRO-2: reduce-scattered, sharded
    // ZeRO-2 keeps only a shard of each gradient: the global norm would need the shards'
    // squares all-reduced, which ZeroRedundancyOptimizer does not do, so it does not clip.
    if (!a.zero) grad_norm = optim::clip_grad_norm_(gpt->parameters(), 1.0);
    opt->step();
    const double lr = sched.get_last_lr();
    sched.step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool eval_now = step % a.eval_every == 0 || step == a.steps;
    if (eval_now) val = evaluate(*gpt, corpus, a, pg.get());
    if (csv) {
      fmt::print(csv, "{},{:.2f},{:.3e},{:.4f},{}\n", step, seconds, lr, loss.item(),
                 eval_now ? fmt::format("{:.4f}", val) : "");
      if (eval_now) {
        fmt::print("step {}: train {:.4f}, val {:.4f} ({:.0f}% of the unigram entropy), {:.0f} s\n", step,
                   loss.item(), val, 100 * val / entropy, seconds);
        std::fflush(csv);  // a log or a `tail -f` of the CSV sees each evaluation as it comes
        std::fflush(stdout);
      }
    }
    ProgressStats stats{{"loss", loss.item()}, {"lr", lr}};
    if (!a.zero) stats.push_back({"norm", grad_norm});  // the norm before clipping
    bar.update(1, stats);
  }
  bar.close();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (talk) {
    std::fclose(csv);
    fmt::print("final val loss {:.4f} nats = {:.2f} x the unigram entropy {:.3f}, after {} steps in {:.1f} s\n",
               val, val / entropy, entropy, a.steps, seconds);
    print_sample(*gpt, a, "after training");
    const std::string ckpt = (fs::path(a.out) / "tiny_gpt.safetensors").string();
    models::save_gpt(ckpt, *gpt, {{"step", std::to_string(a.steps)}, {"val_loss", fmt::format("{:.4f}", val)}});
    fmt::print("wrote {}/loss.csv, {}\n", a.out, ckpt);
    write_plot(a.out);
  }
  if (pg) par::destroy_process_group();
  return a.max_val_ratio > 0 && val > a.max_val_ratio * entropy ? 1 : 0;
}

int generate_only(const Args& a) {
  const std::string ckpt = (fs::path(a.out) / "tiny_gpt.safetensors").string();
  Metadata meta;
  auto gpt = models::load_gpt(ckpt, Device("cpu"), &meta);
  fmt::print("loaded {} (step {}, val loss {}): {} parameters, head tied: {}\n", ckpt, meta["step"],
             meta["val_loss"], gpt->num_params(), gpt->lm_head->weight.is_same(gpt->wte->weight));
  print_sample(*gpt, a, "from the checkpoint");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 24: a tiny byte-level GPT (single process, or dplab-run for DDP / ZeRO)"};
  Args a;
  app.add_option("--steps", a.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", a.batch, "windows per step, the GLOBAL batch (split over the ranks)")->check(CLI::PositiveNumber);
  app.add_option("--block", a.block, "bytes per window = the model's block_size")->check(CLI::PositiveNumber);
  app.add_option("--n-layer", a.n_layer)->check(CLI::PositiveNumber);
  app.add_option("--n-head", a.n_head)->check(CLI::PositiveNumber);
  app.add_option("--n-embd", a.n_embd)->check(CLI::PositiveNumber);
  app.add_option("--lr", a.lr, "peak learning rate, after the warm-up");
  app.add_option("--min-lr", a.min_lr, "the lr the cosine ends at");
  app.add_option("--warmup", a.warmup, "warm-up steps");
  app.add_option("--weight-decay", a.weight_decay, "AdamW's decay of the matrices");
  app.add_option("--eval-every", a.eval_every, "steps between validation losses")->check(CLI::PositiveNumber);
  app.add_option("--eval-batches", a.eval_batches, "validation batches per evaluation")->check(CLI::PositiveNumber);
  app.add_option("--seed", a.seed);
  app.add_option("--data", a.data, "a text file, plain or gzip (default: the Jargon File of jargon-text)");
  app.add_option("--out", a.out, "directory of loss.csv, loss.png, tiny_gpt.safetensors");
  app.add_option("--prompt", a.prompt, "the start of every sample");
  app.add_option("--sample-tokens", a.sample_tokens, "bytes to generate per sample");
  app.add_option("--zero", a.zero, "under dplab-run: ZeRO stage 1 or 2 instead of DDP")->check(CLI::Range(0, 2));
  app.add_flag("--bf16", a.bf16, "bfloat16 autocast around forward and loss");
  app.add_option("--threads", a.threads, "threads of a single process (ranks use 1 each)")->check(CLI::PositiveNumber);
  app.add_flag("--generate", a.generate, "load --out's checkpoint and sample from it; no training");
  app.add_option("--max-val-ratio", a.max_val_ratio, "exit 1 if the final val loss exceeds this x the unigram entropy");
  CLI11_PARSE(app, argc, argv);
  try {
    return a.generate ? generate_only(a) : train(a);
  } catch (const std::exception& e) {
    fmt::print(stderr, "24_tiny_gpt: {}\n", e.what());
    return 1;
  }
}
