// gpt.cpp: GPT (see gpt.h): the embeddings, the stack of blocks, the tied head, and
// GPT-2's initialisation.
// Read next: tests/nn/test_transformer_modules.cpp, which checks every gradient of a small
// GPT against a float64 evaluation of the same graph.
#include "models/gpt.h"

#include <cmath>

#include "framework/nn/init.h"
#include "framework/ops/ops.h"

namespace dplab::models {

GPT::GPT(GPTConfig cfg) : config(cfg) {
  DPLAB_CHECK(cfg.vocab_size > 0 && cfg.block_size > 0 && cfg.n_layer > 0,
              "GPT: expected positive vocab_size, block_size and n_layer, got {}, {} and {}",
              cfg.vocab_size, cfg.block_size, cfg.n_layer);
  DPLAB_CHECK(cfg.dropout >= 0.0 && cfg.dropout < 1.0, "GPT: dropout must lie in [0, 1), got {}",
              cfg.dropout);
  const nn::TransformerOptions block{.bias = cfg.bias, .dropout = cfg.dropout};
  wte = register_module("wte", std::make_shared<nn::Embedding>(cfg.vocab_size, cfg.n_embd));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(cfg.block_size, cfg.n_embd));
  h = register_module("h", std::make_shared<nn::Sequential>());
  for (int64_t i = 0; i < cfg.n_layer; ++i)
    h->push_back(std::make_shared<nn::TransformerBlock>(cfg.n_embd, cfg.n_head, block));
  const nn::LayerNormOptions norm{.bias = cfg.bias};
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(cfg.n_embd, norm));
  const nn::LinearOptions no_bias{.bias = false};
  lm_head =
      register_module("lm_head", std::make_shared<nn::Linear>(cfg.n_embd, cfg.vocab_size, no_bias));
  // The tie: both handles (the member and the module's registry) now point at wte's tensor.
  // Module::named_parameters() lists a tensor once, under the first name it meets (wte.weight);
  // state_dict() keeps both keys; clone_to() builds a new GPT, which ties its own pair here.
  lm_head->weight = wte->weight;
  lm_head->parameter("weight") = wte->weight;
  reset_parameters();
}

void GPT::reset_parameters() {
  for (auto& [path, m] : named_modules()) {
    if (auto lin = std::dynamic_pointer_cast<nn::Linear>(m)) {
      if (lin->weight.is_same(wte->weight)) continue;  // the tied head: drawn once, as wte
      nn::init::normal_(lin->weight, 0.0, 0.02);
      if (lin->bias.defined()) nn::init::zeros_(lin->bias);
    } else if (auto emb = std::dynamic_pointer_cast<nn::Embedding>(m)) {
      nn::init::normal_(emb->weight, 0.0, 0.02);
    } else if (auto ln = std::dynamic_pointer_cast<nn::LayerNorm>(m)) {
      ln->reset_parameters();
    }
  }
  // Each block adds two branches to the residual stream, 2 n_layer in all; with independent
  // terms the stream's variance grows by their sum, so each branch's last projection is
  // scaled by 1/sqrt(2 n_layer) to keep the sum's variance as one branch's (GPT-2, section 2.3).
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (const auto& m : h->children()) {
    auto& block = dynamic_cast<nn::TransformerBlock&>(*m);
    nn::init::normal_(block.attn->c_proj->weight, 0.0, residual_std);
    nn::init::normal_(block.mlp->c_proj->weight, 0.0, residual_std);
  }
}

Tensor GPT::forward(const Tensor& ids) {
  DPLAB_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64,
              "GPT: expected ids [B, T] of int64 token ids, got {} {}", shape_str(ids.shape()),
              dtype_name(ids.dtype()));
  const int64_t T = ids.size(1);
  DPLAB_CHECK(T <= config.block_size,
              "GPT: a sequence of {} positions is longer than block_size {} (wpe has {} rows)", T,
              config.block_size, config.block_size);
  Tensor positions = arange(T, {.dtype = DType::Int64, .device = ids.device()});
  // [B, T, C] + [T, C]: every sequence of the batch gets the same position vectors.
  Tensor x = add(wte->forward(ids), wpe->forward(positions));
  x = dropout(x, static_cast<float>(config.dropout), is_training());
  x = ln_f->forward(h->forward(x));
  return lm_head->forward(x);  // [B, T, C] @ wte^T -> [B, T, V]
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) {
  return lm_loss(forward(ids), targets);
}

int64_t GPT::num_params(bool non_embedding) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return non_embedding ? n - wpe->weight.numel() : n;
}

std::shared_ptr<nn::Module> GPT::make_empty_copy() const { return std::make_shared<GPT>(config); }

int64_t gpt_param_count(const GPTConfig& c) {
  const int64_t C = c.n_embd, per_norm = c.bias ? 2 * C : C;
  const int64_t block = 12 * C * C + (c.bias ? 9 * C : 0) + 2 * per_norm;
  return c.vocab_size * C + c.block_size * C + c.n_layer * block + per_norm;
}

Tensor lm_loss(const Tensor& logits, const Tensor& targets) {
  DPLAB_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
                  logits.size(1) == targets.size(1),
              "lm_loss: expected logits [B, T, V] and targets [B, T], got {} and {}",
              shape_str(logits.shape()), shape_str(targets.shape()));
  // Each of the B*T positions is one classification over the vocabulary.
  const int64_t V = logits.size(2);
  return cross_entropy(reshape(logits, {-1, V}), reshape(targets, {-1}));
}

}  // namespace dplab::models
