// gpt.h: GPT-2, the decoder-only transformer language model, as nanoGPT writes it.
//   ids [B, T] int64 -> wte(ids) + wpe(0..T-1)           token and position embeddings [B, T, C]
//                    -> h.0 ... h.{n_layer-1}            TransformerBlocks (nn/transformer.h)
//                    -> ln_f -> lm_head                  logits [B, T, vocab_size]
// logits[b, t] scores the token that follows ids[b, t]; attention is causal, so they depend
// on ids[b, 0..t] only, and one forward trains T predictions at once (loss()).
// The head is TIED to the token embedding: lm_head.weight IS wte.weight (one tensor), so a
// token's input vector is also the direction that scores it as output. As in PyTorch the
// state dict holds both keys (sharing storage) and parameters() lists the tensor once,
// as wte.weight; its gradient sums both uses.
// Keys are nanoGPT's without its "transformer." prefix: wte.weight, h.0.attn.c_attn.weight, ...
// Read next: gpt.cpp (GPT-2's initialisation), nn/transformer.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "framework/nn/transformer.h"

namespace dplab::models {

// The defaults are GPT-2 small's (124,439,808 parameters, 12 layers of 768 channels).
struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the most positions one forward takes (wpe has this many rows)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;  // after the embeddings, on attention weights, on residual branches
  bool bias = true;      // biases in Linear and LayerNorm layers
};

class GPT : public nn::Module {
 public:
  explicit GPT(GPTConfig config = {});
  // ids: [B, T] int64 with T <= block_size, each id in [0, vocab_size) -> logits [B, T, V]
  Tensor forward(const Tensor& ids) override;
  // Mean cross entropy of forward(ids) against targets [B, T] (usually ids shifted by one).
  Tensor loss(const Tensor& ids, const Tensor& targets);
  // Parameters counted once each (the tied head is wte); non_embedding leaves out wpe, as
  // nanoGPT's get_num_params() does (wte stays: it is also the head's weight).
  int64_t num_params(bool non_embedding = false) const;
  // GPT-2's: every Linear and Embedding weight ~ N(0, 0.02), biases 0, LayerNorms 1 and 0,
  // and each residual branch's last projection (attn.c_proj, mlp.c_proj) ~ N(0, 0.02 /
  // sqrt(2 n_layer)).
  void reset_parameters();

  std::string name() const override { return "GPT"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override;

  GPTConfig config;
  std::shared_ptr<nn::Embedding> wte;  // [vocab_size, n_embd]
  std::shared_ptr<nn::Embedding> wpe;  // [block_size, n_embd]
  std::shared_ptr<nn::Sequential> h;   // n_layer TransformerBlocks, "0", "1", ...
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // n_embd -> vocab_size, no bias, weight = wte->weight
};

// What GPT(c).num_params() counts, without building the model (GPT-2 small's weights alone
// are 475 MiB): per block 12 C^2 + 13 C (c_attn 3C^2 + 3C, attn.c_proj C^2 + C, mlp.c_fc
// 4C^2 + 4C, mlp.c_proj 4C^2 + C, two LayerNorms 2C each; without bias 12 C^2 + 2 C), plus
// wte V C (the tied head adds nothing), wpe T C and ln_f 2C (C without bias).
// GPTConfig{}: 124,439,808, GPT-2 small's count; dplab-project --model gpt2-small uses it.
int64_t gpt_param_count(const GPTConfig& c);

// logits [B, T, V] and targets [B, T] int64 -> the mean over all B*T positions of
// -log softmax(logits[b, t])[targets[b, t]].
Tensor lm_loss(const Tensor& logits, const Tensor& targets);

}  // namespace dplab::models
