// transformer.h: the layers a GPT is built from, each a Module with nanoGPT's names so a
// state dict reads like PyTorch's (h.0.attn.c_attn.weight, h.0.mlp.c_proj.bias, ...):
//   Embedding            a table of rows picked by int64 ids     (the embedding op)
//   LayerNorm            normalise each row over the last dim   (the layer_norm op)
//   CausalSelfAttention  multi-head attention that looks only at earlier positions
//   MLPBlock             Linear(C, 4C), GELU (tanh), Linear(4C, C)
//   TransformerBlock     pre-LN residual block: x + attn(ln_1(x)), then x + mlp(ln_2(x))
// Shapes in comments: B batch, T positions, C = n_embd channels, H heads of D = C / H.
// Initialisation here is PyTorch's per layer; models/gpt.h re-initialises as GPT-2 does.
// Read next: transformer.cpp, then models/gpt.h (the model that stacks these).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "framework/nn/layers.h"

namespace dplab::nn {

// ---- Embedding: out[i..., :] = weight[ids[i...], :].  ids: int64 [...]  weight: [V, D] ----
struct EmbeddingOptions {
  // This row starts at zero and gets no gradient (a "no token here" id); negative counts
  // from num_embeddings, as in PyTorch.
  std::optional<int64_t> padding_idx;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});
  Tensor forward(const Tensor& ids) override;  // [...] -> [..., embedding_dim]
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  void reset_parameters();  // N(0, 1), PyTorch's default; the padding row zero

  int64_t num_embeddings, embedding_dim;
  EmbeddingOptions options;
  Tensor weight;  // [num_embeddings, embedding_dim]
};

// ---- LayerNorm over the last dim: y = (x - mean) / sqrt(var + eps) * weight + bias ----
// mean and the biased var are each row's own (C values), unlike BatchNorm's per-channel
// statistics over the batch, so training and eval compute the same thing and nothing is
// kept between steps.
struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learnable weight (ones) and bias (zeros)
  bool bias = true;                // false: weight only (nanoGPT's bias=False)
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_shape, LayerNormOptions options = {});
  Tensor forward(const Tensor& x) override;  // [..., C] -> [..., C]
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  void reset_parameters();  // weight = 1, bias = 0

  int64_t normalized_shape;
  LayerNormOptions options;
  Tensor weight, bias;  // [C] each; undefined without elementwise_affine (bias: without bias)
};

// What the attention, MLP and block layers share.
struct TransformerOptions {
  bool bias = true;                // biases in the Linear layers (GPT-2 has them)
  double dropout = 0.0;            // on attention weights and on each residual branch, in training
  Generator* generator = nullptr;  // dropout's masks (not owned); nullptr: the default one
};

// ---- CausalSelfAttention.  x: [B, T, C] -> [B, T, C] ----
// Each position t asks (query) every position u <= t (key) how relevant it is, and takes
// their values weighted by softmax over u of q_t . k_u / sqrt(D), head by head:
//   q, k, v = split(x W_attn^T + b_attn)               one fused Linear(C, 3C): c_attn
//   y_h = causal_softmax(q_h k_h^T / sqrt(D)) v_h       H heads of D dims, independently
//   out = concat_h(y_h) W_proj^T + b_proj               c_proj
// Dividing by sqrt(D) keeps the scores' variance near 1 whatever D is (q . k sums D products),
// so the softmax does not saturate as heads grow.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, TransformerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "CausalSelfAttention"; }
  std::shared_ptr<Module> make_empty_copy() const override;

  int64_t n_embd, n_head;
  TransformerOptions options;
  std::shared_ptr<Linear> c_attn;  // C -> 3C: q, k, v side by side
  std::shared_ptr<Linear> c_proj;  // C -> C: the heads mixed back into the residual stream
};

// ---- MLPBlock.  x: [B, T, C] -> [B, T, C]: position by position, Linear, GELU, Linear ----
class MLPBlock : public Module {
 public:
  explicit MLPBlock(int64_t n_embd, TransformerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MLPBlock"; }
  std::shared_ptr<Module> make_empty_copy() const override;

  int64_t n_embd;
  TransformerOptions options;
  std::shared_ptr<Linear> c_fc;    // C -> 4C
  std::shared_ptr<Linear> c_proj;  // 4C -> C
};

// ---- TransformerBlock.  x: [B, T, C] -> [B, T, C] ----
// Pre-LN (GPT-2): each branch reads a normalised copy of x and adds its result to x itself,
//   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
// so the residual stream is a plain sum and its gradient reaches every block unscaled.
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t n_embd, int64_t n_head, TransformerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "TransformerBlock"; }
  std::shared_ptr<Module> make_empty_copy() const override;

  int64_t n_embd, n_head;
  TransformerOptions options;
  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<MLPBlock> mlp;
};

}  // namespace dplab::nn
