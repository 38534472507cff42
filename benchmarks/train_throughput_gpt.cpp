// bench_train_gpt: training tokens/s of a small character-level GPT (models/gpt.h) on the
// Jargon File (datasets/text_corpus.h, Debian's jargon-text), the GPT sibling of
// bench_train_throughput. The model and recipe are nanoGPT's shakespeare_char at a CPU's size:
// vocabulary 256 (bytes), n_layer 4, n_head 4, n_embd 128, block 64, batch 16, biases,
// dropout 0, GPT-2's initialisation, AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on
// the matrices only (decay_groups), gradients clipped to norm 1.0. A step is what a user's
// loop does: zero_grad, forward + loss, backward, clip_grad_norm_, AdamW step. The batches are
// 32 random windows of the training split (seed --seed), drawn before the clock starts as a
// loader's prefetched batches would be, and cycled. Each row times whole steps past --warmup
// until --min-time has passed, split into forward / backward / clip + optimizer.
// train_throughput_gpt_torch.py builds the same model in PyTorch and runs both in paired
// rounds (docs/benchmarks.md's protocol).
// Run: bench_train_gpt [--threads 1,2] [--min-time 3] [--n-layer 4 --n-head 4 --n-embd 128]
//      [--block 64] [--batch-size 16] [--csv gpt.csv]
// Read next: train_throughput_gpt_torch.py, models/gpt.h.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "benchmarks/cpu_info.h"
#include "datasets/text_corpus.h"
#include "framework/dplab.h"
#include "framework/optim/adam.h"
#include "framework/optim/clip_grad.h"
#include "models/gpt.h"

using namespace dplab;

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Recipe {
  models::GPTConfig config{.vocab_size = datasets::TextCorpus::kVocabSize, .block_size = 64,
                           .n_layer = 4, .n_head = 4, .n_embd = 128, .dropout = 0.0, .bias = true};
  int64_t batch = 16;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1, clip = 1.0;
  uint64_t seed = 1337;
  int batches = 32;  // distinct batches, cycled
};

struct Row {
  int threads = 1;
  int64_t steps = 0, tokens_per_step = 0;
  double seconds = 0, forward_s = 0, backward_s = 0, step_s = 0, last_loss = 0;
  double tokens_per_s() const { return static_cast<double>(steps * tokens_per_step) / seconds; }
  double ms(double s) const { return 1e3 * s / static_cast<double>(steps); }
};

Row run(const Recipe& r, const datasets::TextCorpus& corpus, int threads, int warmup,
        double min_time) {
  set_num_threads(threads);
  manual_seed(0);
  models::GPT model(r.config);
  model.train();
  optim::AdamW opt(optim::decay_groups(model, r.weight_decay),
                   {.lr = r.lr, .betas = {r.beta1, r.beta2}, .eps = 1e-8});
  Generator rng(r.seed);
  std::vector<datasets::TokenBatch> data;
  for (int i = 0; i < r.batches; ++i)
    data.push_back(
        corpus.sample_batch(datasets::TextSplit::Train, rng, r.batch, r.config.block_size));

  Row row{.threads = threads, .tokens_per_step = r.batch * r.config.block_size};
  for (int64_t i = 0;; ++i) {
    const datasets::TokenBatch& b = data[static_cast<size_t>(i) % data.size()];
    const auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss = model.loss(b.x, b.y);
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    optim::clip_grad_norm_(model.parameters(), r.clip);
    opt.step();
    const auto t3 = Clock::now();
    if (i < warmup) continue;  // the first steps allocate AdamW's state and warm the caches
    row.steps += 1;
    row.forward_s += secs(t0, t1);
    row.backward_s += secs(t1, t2);
    row.step_s += secs(t2, t3);
    row.seconds += secs(t0, t3);
    if (row.seconds >= min_time && row.steps >= 5) {
      row.last_loss = loss.item();
      break;
    }
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training throughput (tokens/s) of a small character-level GPT, dplab"};
  Recipe r;
  double min_time = 3.0;
  int warmup = 5;
  std::string threads_spec = "1", csv, text;
  app.add_option("--min-time", min_time, "seconds of timed steps per row");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--threads", threads_spec, "comma list of thread counts, e.g. 1,2");
  app.add_option("--n-layer", r.config.n_layer)->check(CLI::PositiveNumber);
  app.add_option("--n-head", r.config.n_head)->check(CLI::PositiveNumber);
  app.add_option("--n-embd", r.config.n_embd)->check(CLI::PositiveNumber);
  app.add_option("--block", r.config.block_size, "sequence length T")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", r.batch)->check(CLI::PositiveNumber);
  app.add_option("--lr", r.lr, "AdamW lr (constant)");
  app.add_option("--seed", r.seed, "the generator that draws the batches' windows");
  app.add_option("--text", text, "a text file, plain or gzip (default: the Jargon File)");
  app.add_option("--csv", csv, "also write the rows to this CSV file");
  CLI11_PARSE(app, argc, argv);

  try {
    const datasets::TextCorpus corpus({.path = text});
    const bench::CpuInfo cpu = bench::cpu_info();
    const models::GPTConfig& c = r.config;
    fmt::print("dplab GPT training throughput: n_layer {}, n_head {}, n_embd {}, block {}, "
               "batch {}, vocab {}; AdamW lr {} betas ({}, {}) wd {} (matrices), clip {}\n"
               "data: {} ({} training bytes), {} batches cycled\nCPU: {} ({})\nkernels: {}\n",
               c.n_layer, c.n_head, c.n_embd, c.block_size, r.batch, c.vocab_size, r.lr, r.beta1,
               r.beta2, r.weight_decay, r.clip, corpus.path(), corpus.train().size(), r.batches,
               cpu.model, cpu.vector_extensions, kernels_summary());
    fmt::print("{:>7} {:>7} {:>10} {:>9} {:>9} {:>9} {:>12} {:>8}\n", "threads", "steps",
               "ms/step", "fwd ms", "bwd ms", "step ms", "tokens/s", "loss");
    std::vector<Row> rows;
    size_t start = 0;
    while (start <= threads_spec.size()) {
      const size_t comma = threads_spec.find(',', start);
      const std::string item = threads_spec.substr(start, comma - start);
      if (!item.empty()) {
        const Row w = run(r, corpus, std::stoi(item), warmup, min_time);
        fmt::print("{:>7} {:>7} {:>10.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.1f} {:>8.4f}\n",
                   w.threads, w.steps, w.ms(w.seconds), w.ms(w.forward_s), w.ms(w.backward_s),
                   w.ms(w.step_s), w.tokens_per_s(), w.last_loss);
        std::fflush(stdout);
        rows.push_back(w);
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (!csv.empty()) {
      std::ofstream f(csv);
      DPLAB_CHECK(f.good(), "--csv: cannot write {}", csv);
      f << "framework,model,threads,n_layer,n_head,n_embd,block,batch,steps,ms_per_step,"
           "forward_ms,backward_ms,step_ms,tokens_per_s,cpu,vector_extensions\n";
      for (const Row& w : rows)
        f << fmt::format("dplab,gpt,{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.2f},{},{}\n",
                         w.threads, c.n_layer, c.n_head, c.n_embd, c.block_size, r.batch, w.steps,
                         w.ms(w.seconds), w.ms(w.forward_s), w.ms(w.backward_s), w.ms(w.step_s),
                         w.tokens_per_s(), cpu.model, cpu.vector_extensions);
      fmt::print("wrote {}\n", csv);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
