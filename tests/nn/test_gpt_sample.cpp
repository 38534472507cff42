// test_gpt_sample.cpp: sampling from a GPT (models/gpt_sample.h). sample_next on hand-set
// logits: top_k = 1 and temperature 0 are the argmax, a small temperature is too, and the
// frequencies of many draws match softmax (and top-k's renormalised softmax) within a bound
// that a fixed seed makes a fixed outcome, not a flake. generate(): a fixed seed repeats,
// top_k = 1 follows the model's argmax step by step, the context is cropped to block_size.
// save_gpt / load_gpt: the loaded model generates the same text, its head stays tied to its
// embedding, and a file whose two copies of the tied weight differ is refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/io/safetensors.h"
#include "framework/nn/init.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "models/gpt_sample.h"

using namespace dplab;
using namespace dplab::models;

namespace {

GPTConfig small_config() {
  return {.vocab_size = 256, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

// GPT-2's init gives nearly uniform logits; larger weights make the model opinionated, so
// greedy and sampled text differ and a wrong position or crop shows.
std::shared_ptr<GPT> opinionated_gpt(uint64_t seed) {
  manual_seed(seed);
  auto gpt = std::make_shared<GPT>(small_config());
  Generator g(seed + 1);
  NoGradGuard no_grad;
  for (Tensor& p : gpt->parameters())
    if (p.dim() >= 2) p.copy_(mul_scalar(randn(p.shape(), {}, &g), 0.5f));
  return gpt;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

}  // namespace

TEST_CASE("sample_next: top_k = 1, temperature 0 and a tiny temperature are the argmax") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.9f, 0.0f};
  Generator rng(1);
  for (int i = 0; i < 200; ++i) {
    CHECK(sample_next(logits, 1.0, 1, rng) == 1);
    CHECK(sample_next(logits, 5.0, 1, rng) == 1);
    CHECK(sample_next(logits, 0.0, 0, rng) == 1);
    // T = 0.005: p(3) / p(1) = exp(-0.1 / 0.005) = 2e-9; 200 draws never meet it.
    CHECK(sample_next(logits, 0.005, 0, rng) == 1);
  }
  // temperature 0 draws nothing from the generator
  Generator a(7), b(7);
  sample_next(logits, 0.0, 0, a);
  CHECK(a.next_u64() == b.next_u64());
  CHECK_THROWS_WITH(sample_next(logits, -1.0, 0, rng),
                    doctest::Contains("temperature must be finite and >= 0"));
  CHECK_THROWS_WITH(sample_next({}, 1.0, 0, rng), doctest::Contains("no logits"));
}

TEST_CASE("sample_next: frequencies match softmax(l / T), and top-k's renormalised softmax") {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -0.5f, 1.5f};
  const int n = 200000;
  for (double T : {1.0, 0.7, 2.0}) {
    for (int64_t k : {0, 3}) {
      CAPTURE(T);
      CAPTURE(k);
      // expected: softmax over the kept tokens (top 3: indices 2, 4, 0)
      std::vector<double> p(logits.size());
      double z = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        const bool kept = k == 0 || i == 2 || i == 4 || i == 0;
        z += p[i] = kept ? std::exp(logits[i] / T) : 0.0;
      }
      Generator rng(1234);  // fixed: the counts below are the same on every run
      std::vector<int> count(logits.size(), 0);
      for (int i = 0; i < n; ++i) ++count[sample_next(logits, T, k, rng)];
      for (size_t i = 0; i < logits.size(); ++i) {
        CAPTURE(i);
        const double want = p[i] / z, got = static_cast<double>(count[i]) / n;
        // 5 standard errors of a frequency: sqrt(p(1-p)/n) <= 0.0011 here
        CHECK(std::abs(got - want) <= 5.0 * std::sqrt(want * (1.0 - want) / n) + 1e-12);
        if (want == 0.0) CHECK(count[i] == 0);
      }
    }
  }
}

TEST_CASE("generate: a fixed seed repeats, top_k = 1 is the model's argmax, the context is cropped") {
  auto gpt = opinionated_gpt(3);
  const std::vector<int64_t> prompt = bytes_to_ids("Hello");
  const SampleOptions opts{.max_new_tokens = 20, .temperature = 0.8, .top_k = 40};
  Generator a(42), b(42), c(43);
  const auto first = generate(*gpt, prompt, opts, a);
  CHECK(first.size() == prompt.size() + 20);
  CHECK(std::vector<int64_t>(first.begin(), first.begin() + 5) == prompt);
  CHECK(generate(*gpt, prompt, opts, b) == first);
  CHECK(generate(*gpt, prompt, opts, c) != first);  // another seed, other text
  CHECK(gpt->is_training());                         // the flag is restored

  // top_k = 1: every new token is the argmax of the model's last-position logits over the
  // last block_size (8) tokens, here recomputed by hand.
  Generator g(5);
  const auto greedy = generate(*gpt, prompt, {.max_new_tokens = 12, .temperature = 0.8, .top_k = 1}, g);
  NoGradGuard no_grad;
  gpt->eval();
  for (size_t t = prompt.size(); t < greedy.size(); ++t) {
    const size_t T = std::min<size_t>(t, 8);
    std::vector<int64_t> ctx(greedy.begin() + static_cast<long>(t - T), greedy.begin() + static_cast<long>(t));
    const auto logits = gpt->forward(from_vector(ctx, {1, static_cast<int64_t>(T)})).to_vector<float>();
    const auto last = std::vector<float>(logits.end() - 256, logits.end());
    CHECK(greedy[t] == std::max_element(last.begin(), last.end()) - last.begin());
  }
  gpt->train();
  CHECK(ids_to_bytes(bytes_to_ids("a\xff")) == "a\xff");
}

TEST_CASE("save_gpt / load_gpt: the loaded model keeps the tie and generates the same text") {
  auto gpt = opinionated_gpt(9);
  const std::string path = temp_path("dplab_gpt_sample.safetensors");
  save_gpt(path, *gpt, {{"step", "17"}});
  // Both keys are in the file, as equal copies (safetensors has no aliases).
  const Loaded file = load_safetensors(path);
  REQUIRE(file.tensors.contains("wte.weight"));
  REQUIRE(file.tensors.contains("lm_head.weight"));
  CHECK(file.tensors.at("wte.weight").to_vector<float>() == file.tensors.at("lm_head.weight").to_vector<float>());

  Metadata meta;
  auto loaded = load_gpt(path, Device("cpu"), &meta);
  CHECK(meta.at("step") == "17");
  CHECK(loaded->config.n_embd == 16);
  CHECK(loaded->config.block_size == 8);
  CHECK(loaded->lm_head->weight.is_same(loaded->wte->weight));
  CHECK(loaded->lm_head->parameter("weight").is_same(loaded->wte->weight));
  CHECK(loaded->num_params() == gpt->num_params());
  const SampleOptions opts{.max_new_tokens = 30, .temperature = 0.8, .top_k = 40};
  Generator a(11), b(11);
  CHECK(generate(*loaded, bytes_to_ids("The "), opts, b) == generate(*gpt, bytes_to_ids("The "), opts, a));
  // Still tied after training-like changes: writing through wte moves the head too.
  {
    NoGradGuard no_grad;
    loaded->wte->weight.fill_(0.25f);
  }
  CHECK(loaded->lm_head->weight.to_vector<float>()[0] == 0.25f);

  // A file whose head is not its embedding is not a tied GPT: refused, naming both keys.
  StateDict sd = file.tensors;
  sd.insert("lm_head.weight", mul_scalar(file.tensors.at("wte.weight"), 2.0f));
  save_safetensors(path, sd, file.metadata);
  CHECK_THROWS_WITH(load_gpt(path), doctest::Contains("wte.weight and an lm_head.weight that differ"));
  std::remove(path.c_str());
}
