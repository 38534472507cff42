// test_transformer_modules.cpp: the transformer layers (nn/transformer.h) and GPT
// (models/gpt.h). Gradients of attention and a block by finite differences (gradcheck.h);
// causality; the tied head (one tensor, listed once, its gradient summing both uses);
// GPT-2's initialisation statistics; clone_to and state_dict keeping the tie; and a 2-layer
// GPT's loss and every parameter's gradient against the float64 evaluation of the same graph
// in gpt_f64_reference.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/init.h"
#include "framework/nn/transformer.h"
#include "framework/ops/ops.h"
#include "framework/optim/adam.h"
#include "framework/tensor/random.h"
#include "models/gpt.h"
#include "tests/gradcheck.h"
#include "tests/nn/gpt_f64_reference.h"

using namespace dplab;
using dplab::testing::gradcheck;
using dplab::testing::leaf;
using V = std::vector<Tensor>;

namespace {

// A GPT small enough that a float64 finite-difference gradient of every parameter is cheap.
models::GPTConfig tiny_config() {
  return {.vocab_size = 11, .block_size = 5, .n_layer = 2, .n_head = 2, .n_embd = 8};
}

// Redraws every parameter: weights and biases N(0, scale), LayerNorm weights 1 + N(0, 0.2).
// GPT-2's init (small weights, zero biases, unit norms) leaves attention nearly uniform and
// many terms at special values where a wrong formula could still give the right number.
void scramble(nn::Module& m, uint64_t seed, double scale = 0.5) {
  Generator gen(seed);
  for (auto& [name, p] : m.named_parameters()) {
    const bool norm_weight = name.find("ln_") != std::string::npos && name.ends_with("weight");
    nn::init::normal_(p, norm_weight ? 1.0 : 0.0, norm_weight ? 0.2 : scale, &gen);
  }
}

// x first, then the module's parameters: gradcheck perturbs its inputs in place, and these
// handles are the module's own tensors, so f may ignore all but x and call the module.
V x_and_parameters(const Tensor& x, const nn::Module& m) {
  V inputs{x};
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  return inputs;
}

Tensor ids_tensor(const std::vector<int64_t>& v, int64_t B, int64_t T) {
  return from_vector(v, {B, T});
}

// The message of the Error f throws ("" when it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace

TEST_CASE("Embedding and LayerNorm: padding_idx, options, names, and clone_to keeps them") {
  manual_seed(16);
  nn::Embedding emb(5, 3, {.padding_idx = -1});  // counts from the end: row 4
  CHECK(emb.options.padding_idx == 4);
  CHECK(emb.name() == "Embedding(5, 3, padding_idx=4)");
  CHECK(emb.weight.narrow(4, 1).to_vector<float>() == std::vector<float>(3, 0.0f));
  Tensor out = emb.forward(ids_tensor({4, 0, 4, 0}, 2, 2));
  CHECK(out.shape() == Shape{2, 2, 3});
  sum(out).backward();
  const std::vector<float> g = emb.weight.grad().to_vector<float>();
  CHECK(std::vector<float>(g.begin(), g.begin() + 3) == std::vector<float>(3, 2.0f));  // id 0 twice
  CHECK(std::vector<float>(g.begin() + 12, g.end()) == std::vector<float>(3, 0.0f));   // padding
  auto emb_copy = std::dynamic_pointer_cast<nn::Embedding>(emb.clone_to(Device("cpu:1")));
  REQUIRE(emb_copy != nullptr);
  CHECK(emb_copy->options.padding_idx == 4);
  CHECK(emb_copy->weight.to_vector<float>() == emb.weight.to_vector<float>());

  nn::LayerNorm ln(4, {.bias = false});  // nanoGPT's bias=False: weight only
  CHECK(ln.named_parameters().size() == 1);
  CHECK(ln.name() == "LayerNorm((4,), eps=1e-05, elementwise_affine=true)");
  const std::vector<float> y =
      ln.forward(from_vector(std::vector<float>{1, 2, 3, 4, -2, 0, 2, 4}, {2, 4}))
          .to_vector<float>();
  for (int row = 0; row < 2; ++row) {  // each row: mean 0, biased variance 1 (up to eps)
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += y[row * 4 + c] / 4.0;
    for (int c = 0; c < 4; ++c) var += (y[row * 4 + c] - mean) * (y[row * 4 + c] - mean) / 4.0;
    CHECK(std::abs(mean) <= 1e-6);
    CHECK(std::abs(var - 1.0) <= 1e-4);
  }
  CHECK(std::dynamic_pointer_cast<nn::LayerNorm>(ln.clone_to(Device("cpu:1")))->bias.defined() ==
        false);
}

TEST_CASE("GPT's dropout acts in training only, and describe() shows the tree") {
  manual_seed(17);
  models::GPTConfig cfg = tiny_config();
  cfg.dropout = 0.2;
  models::GPT gpt(cfg);
  const Tensor ids = ids_tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 5);
  NoGradGuard no_grad;
  CHECK(gpt.forward(ids).to_vector<float>() != gpt.forward(ids).to_vector<float>());
  gpt.eval();
  const std::vector<float> a = gpt.forward(ids).to_vector<float>();
  CHECK(a == gpt.forward(ids).to_vector<float>());
  cfg.dropout = 0.0;
  auto plain = std::make_shared<models::GPT>(cfg);
  plain->load_state_dict(gpt.state_dict());
  CHECK(plain->forward(ids).to_vector<float>() == a);  // eval: as if there were no dropout

  const std::string tree = nn::describe(gpt);
  for (const char* line : {"(wte): Embedding(11, 8)", "GPT(\n", "(0): TransformerBlock(\n",
                           "(attn): CausalSelfAttention(\n",
                           "(lm_head): Linear(in_features=8, out_features=11, bias=false)"})
    CHECK_MESSAGE(tree.find(line) != std::string::npos, line << " is not in\n" << tree);
}

TEST_CASE("a small GPT learns a fixed batch: AdamW on parameters() lowers the loss") {
  manual_seed(18);
  models::GPT gpt({.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16});
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-2});
  // Two sequences that count up and down: the next token is a function of the last two.
  const Tensor ids = ids_tensor({0, 1, 2, 3, 4, 5, 6, 7, 9, 8, 7, 6, 5, 4, 3, 2}, 2, 8);
  const Tensor targets = ids_tensor({1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1}, 2, 8);
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = gpt.loss(ids, targets);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(first == doctest::Approx(std::log(11.0)).epsilon(0.05));  // GPT-2's init: near uniform
  CHECK(last < 0.3f * first);
}

TEST_CASE("the transformer layers and GPT say what is wrong with their inputs") {
  CHECK(error_of([] { nn::CausalSelfAttention(6, 4); }).find("divisible by n_head") !=
        std::string::npos);
  CHECK(error_of([] {
          nn::LayerNorm(4).forward(zeros({2, 5}));
        }).find("expected input [..., 4]") != std::string::npos);
  CHECK(error_of([] {
          nn::CausalSelfAttention(4, 2).forward(zeros({2, 4}));
        }).find("expected input [B, T, 4]") != std::string::npos);
  models::GPT gpt(tiny_config());
  CHECK(error_of([&] {
          gpt.forward(ids_tensor(std::vector<int64_t>(12, 0), 2, 6));
        }).find("longer than block_size 5") != std::string::npos);
  CHECK(error_of([&] { gpt.forward(zeros({2, 3})); }).find("int64 token ids") != std::string::npos);
  CHECK(error_of([&] {
          gpt.forward(ids_tensor({0, 11}, 1, 2));
        }).find("[0, 11)") != std::string::npos);
}

TEST_CASE("CausalSelfAttention and TransformerBlock: gradients of input and every parameter "
          "match finite differences") {
  manual_seed(1);
  auto attn = std::make_shared<nn::CausalSelfAttention>(6, 2);
  scramble(*attn, 2);
  gradcheck(
      "attention", [&](const V& in) { return attn->forward(in[0]); },
      x_and_parameters(leaf({2, 4, 6}, 3), *attn));

  auto block = std::make_shared<nn::TransformerBlock>(8, 2);
  scramble(*block, 4);
  gradcheck(
      "block", [&](const V& in) { return block->forward(in[0]); },
      x_and_parameters(leaf({2, 3, 8}, 5), *block));
}

TEST_CASE("GPT is causal: later tokens never change the logits of earlier positions") {
  manual_seed(6);
  models::GPT gpt({.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8});
  scramble(gpt, 7);
  NoGradGuard no_grad;
  const int64_t B = 2, T = 6, vocab = 11;
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  const std::vector<float> base = gpt.forward(ids_tensor(ids, B, T)).to_vector<float>();
  for (int64_t t = 0; t + 1 < T; ++t) {
    CAPTURE(t);
    std::vector<int64_t> changed = ids;  // every token after t replaced
    for (int64_t b = 0; b < B; ++b)
      for (int64_t u = t + 1; u < T; ++u) changed[b * T + u] = (ids[b * T + u] + 1 + u) % vocab;
    const std::vector<float> out = gpt.forward(ids_tensor(changed, B, T)).to_vector<float>();
    for (int64_t b = 0; b < B; ++b) {
      auto row = [&](const std::vector<float>& v, int64_t u) {  // logits of (b, u)
        return std::vector<float>(v.begin() + (b * T + u) * vocab,
                                  v.begin() + (b * T + u + 1) * vocab);
      };
      for (int64_t u = 0; u <= t; ++u) CHECK(max_abs_diff(row(base, u), row(out, u)) <= 1e-6);
      CHECK(max_abs_diff(row(base, t + 1), row(out, t + 1)) > 1e-3);  // the change is seen
    }
  }
}

TEST_CASE("GPT's head is tied: one tensor, listed once, its gradient the sum of both uses") {
  manual_seed(8);
  const models::GPTConfig cfg = tiny_config();
  auto gpt = std::make_shared<models::GPT>(cfg);
  scramble(*gpt, 9);
  CHECK(gpt->lm_head->weight.is_same(gpt->wte->weight));
  CHECK(gpt->lm_head->parameter("weight").is_same(gpt->wte->weight));

  int64_t listed = 0;
  for (const auto& [name, p] : gpt->named_parameters()) {
    CHECK(name != "lm_head.weight");
    listed += p.is_same(gpt->wte->weight);
  }
  CHECK(listed == 1);
  // Per block: ln_1, ln_2 2C each, c_attn 3C^2+3C, attn.c_proj C^2+C, c_fc 4C^2+4C,
  // mlp.c_proj 4C^2+C: 12C^2 + 13C. Plus wte, wpe and ln_f; the head adds nothing.
  auto expected = [](const models::GPTConfig& c) {
    const int64_t C = c.n_embd;
    return c.vocab_size * C + c.block_size * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
  };
  CHECK(gpt->num_params() == expected(cfg));
  CHECK(gpt->num_params(true) == expected(cfg) - cfg.block_size * cfg.n_embd);
  CHECK(expected(models::GPTConfig{}) == 124439808);  // GPT-2 small, as gpt.h says
  // gpt_param_count: the same count without building the model, with and without biases
  CHECK(models::gpt_param_count(cfg) == gpt->num_params());
  CHECK(models::gpt_param_count(models::GPTConfig{}) == 124439808);
  models::GPTConfig no_bias = cfg;
  no_bias.bias = false;
  CHECK(models::gpt_param_count(no_bias) == models::GPT(no_bias).num_params());

  const Tensor ids = ids_tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 5);
  const Tensor targets = ids_tensor({2, 3, 4, 5, 6, 7, 8, 9, 10, 0}, 2, 5);
  gpt->loss(ids, targets).backward();
  const std::vector<float> tied = gpt->wte->weight.grad().to_vector<float>();

  // The same model untied: the head gets a copy of the weight of its own.
  auto untied = std::dynamic_pointer_cast<models::GPT>(gpt->clone_to(Device("cpu:0")));
  Tensor head = untied->wte->weight.contiguous_copy_on(Device("cpu:0"));
  head.requires_grad_(true);
  untied->lm_head->weight = untied->lm_head->parameter("weight") = head;
  untied->loss(ids, targets).backward();
  const std::vector<float> as_input = untied->wte->weight.grad().to_vector<float>();
  const std::vector<float> as_head = head.grad().to_vector<float>();
  double scale = 0.0, as_input_max = 0.0, as_head_max = 0.0;
  for (size_t i = 0; i < tied.size(); ++i) {
    scale = std::max(scale, double(std::abs(tied[i])));
    as_input_max = std::max(as_input_max, double(std::abs(as_input[i])));
    as_head_max = std::max(as_head_max, double(std::abs(as_head[i])));
  }
  CHECK(as_input_max > 1e-3 * scale);  // both uses contribute
  CHECK(as_head_max > 1e-3 * scale);
  for (size_t i = 0; i < tied.size(); ++i)
    CHECK(std::abs(tied[i] - (as_input[i] + as_head[i])) <= 1e-5 * scale);
}

TEST_CASE("GPT's initialisation is GPT-2's: N(0, 0.02), residual projections / sqrt(2 n_layer)") {
  manual_seed(10);
  const int64_t L = 4;
  models::GPT gpt({.vocab_size = 256, .block_size = 64, .n_layer = L, .n_head = 4, .n_embd = 128});
  // The sample std of n draws of N(0, s) is s within a relative 1/sqrt(2n): 0.8% for the
  // smallest tensor here (wpe, 8192 values), so 5% is over six of those, and the mean of n
  // draws is within s/sqrt(n): 0.1 s is over nine. The seed is fixed as well.
  auto check_normal = [](const std::string& what, const Tensor& t, double want_std) {
    CAPTURE(what);
    const std::vector<float> v = t.to_vector<float>();
    double mean = 0.0, sq = 0.0;
    for (float x : v) mean += x / double(v.size());
    for (float x : v) sq += (x - mean) * (x - mean) / double(v.size());
    CHECK(std::abs(std::sqrt(sq) - want_std) <= 0.05 * want_std);
    CHECK(std::abs(mean) <= 0.1 * want_std);
  };
  auto all_equal = [](const Tensor& t, float value) {
    const std::vector<float> v = t.to_vector<float>();
    return std::all_of(v.begin(), v.end(), [&](float x) { return x == value; });
  };
  const double residual_std = 0.02 / std::sqrt(2.0 * L);
  check_normal("wte", gpt.wte->weight, 0.02);
  check_normal("wpe", gpt.wpe->weight, 0.02);
  for (const auto& m : gpt.h->children()) {
    auto& block = dynamic_cast<nn::TransformerBlock&>(*m);
    check_normal("attn.c_attn", block.attn->c_attn->weight, 0.02);
    check_normal("attn.c_proj", block.attn->c_proj->weight, residual_std);
    check_normal("mlp.c_fc", block.mlp->c_fc->weight, 0.02);
    check_normal("mlp.c_proj", block.mlp->c_proj->weight, residual_std);
  }
  for (const auto& [name, p] : gpt.named_parameters()) {
    CAPTURE(name);
    if (name.ends_with("bias")) CHECK(all_equal(p, 0.0f));
    if (name.find("ln_") != std::string::npos && name.ends_with("weight"))
      CHECK(all_equal(p, 1.0f));
  }
}

TEST_CASE("GPT's clone_to and state_dict keep the head tied") {
  manual_seed(11);
  auto gpt = std::make_shared<models::GPT>(tiny_config());
  scramble(*gpt, 12);
  const Tensor ids = ids_tensor({0, 1, 2, 3, 4, 4, 3, 2, 1, 0}, 2, 5);
  const std::vector<float> want = gpt->forward(ids).to_vector<float>();

  auto copy = std::dynamic_pointer_cast<models::GPT>(gpt->clone_to(Device("cpu:1")));
  REQUIRE(copy != nullptr);
  CHECK(copy->lm_head->weight.is_same(copy->wte->weight));
  CHECK(copy->lm_head->parameter("weight").is_same(copy->wte->weight));
  CHECK(copy->wte->weight.device() == Device("cpu:1"));
  CHECK(copy->parameters().size() == gpt->parameters().size());
  CHECK(copy->forward(ids.to(Device("cpu:1"))).to_vector<float>() == want);

  // The dict has both keys, as PyTorch's does, sharing one storage.
  const StateDict sd = gpt->state_dict();
  REQUIRE(sd.contains("wte.weight"));
  REQUIRE(sd.contains("lm_head.weight"));
  CHECK(sd.at("wte.weight").raw_data() == sd.at("lm_head.weight").raw_data());
  manual_seed(13);
  models::GPT fresh(tiny_config());
  fresh.load_state_dict(sd);
  CHECK(fresh.lm_head->weight.is_same(fresh.wte->weight));
  CHECK(fresh.forward(ids).to_vector<float>() == want);
}

TEST_CASE("a 2-layer GPT's loss and every gradient match a float64 evaluation of the graph") {
  for (bool bias : {true, false}) {  // GPT-2's biases, and nanoGPT's bias=False
    CAPTURE(bias);
    manual_seed(14);
    models::GPTConfig cfg = tiny_config();
    cfg.bias = bias;
    models::GPT gpt(cfg);
    scramble(gpt, 15);
    const int64_t B = 2, T = 5;
    const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};  // repeats: rows add up
    const std::vector<int64_t> targets = {1, 4, 1, 5, 9, 2, 6, 5, 3, 10};
    Tensor loss = gpt.loss(ids_tensor(ids, B, T), ids_tensor(targets, B, T));
    loss.backward();

    testing::GptF64 ref(gpt);
    const double ref_loss = ref.loss(ids, targets, B, T);
    CHECK(std::abs(loss.item() - ref_loss) <= 1e-4 * std::abs(ref_loss));

    // Central differences in double: truncation ~h^2, rounding ~1e-16 |loss| / h, both far
    // below the float32 gradient's own error. The norm, per parameter tensor P:
    //   max_i |g32_i - g64_i| <= 1e-4 * max_i |g64_i|
    // (relative to the tensor's largest gradient, so elements near zero do not blow it up).
    const double h = 1e-5;
    int64_t checked = 0;
    for (const auto& [name, p] : gpt.named_parameters()) {
      CAPTURE(name);
      REQUIRE(p.grad().defined());
      const std::vector<float> g32 = p.grad().to_vector<float>();
      std::vector<double>& values = ref.params.at(name);
      double worst = 0.0, scale = 0.0;
      for (size_t i = 0; i < values.size(); ++i) {
        const double saved = values[i];
        values[i] = saved + h;
        const double up = ref.loss(ids, targets, B, T);
        values[i] = saved - h;
        const double down = ref.loss(ids, targets, B, T);
        values[i] = saved;
        const double g64 = (up - down) / (2 * h);
        worst = std::max(worst, std::abs(g32[i] - g64));
        scale = std::max(scale, std::abs(g64));
        ++checked;
      }
      CHECK(scale > 0.0);  // every parameter takes part
      CHECK(worst <= 1e-4 * scale);
    }
    CHECK(checked == gpt.num_params());
  }
}
