// transformer.cpp: Embedding, LayerNorm, CausalSelfAttention, MLPBlock, TransformerBlock
// (see transformer.h). The arithmetic is ops.h's (embedding, layer_norm, matmul,
// causal_softmax, gelu); these layers own the parameters and say how the heads are cut.
// Read next: models/gpt.cpp.
#include <cmath>
#include <vector>

#include "framework/nn/init.h"
#include "framework/nn/transformer.h"
#include "framework/ops/ops.h"

namespace dplab::nn {

// ---------------------------------------------------------------------------- Embedding

Embedding::Embedding(int64_t num, int64_t dim, EmbeddingOptions opts)
    : num_embeddings(num), embedding_dim(dim), options(opts) {
  DPLAB_CHECK(num > 0 && dim > 0,
              "Embedding: expected positive num_embeddings and embedding_dim, got {} and {}", num,
              dim);
  if (options.padding_idx) {
    int64_t& pad = *options.padding_idx;
    DPLAB_CHECK(pad >= -num && pad < num,
                "Embedding({}, {}): padding_idx must lie in [-{}, {}), got {}", num, dim, num, num,
                pad);
    if (pad < 0) pad += num;
  }
  weight = register_parameter("weight", init::new_tensor({num, dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight, 0.0, 1.0);
  if (options.padding_idx) {
    Tensor row = weight.narrow(*options.padding_idx, 1);  // a view of that row
    init::zeros_(row);
  }
}

Tensor Embedding::forward(const Tensor& ids) { return embedding(ids, weight, options.padding_idx); }

std::string Embedding::name() const {
  std::string s = fmt::format("Embedding({}, {}", num_embeddings, embedding_dim);
  if (options.padding_idx) s += fmt::format(", padding_idx={}", *options.padding_idx);
  return s + ")";
}

std::shared_ptr<Module> Embedding::make_empty_copy() const {
  return std::make_shared<Embedding>(num_embeddings, embedding_dim, options);
}

// ---------------------------------------------------------------------------- LayerNorm

LayerNorm::LayerNorm(int64_t c, LayerNormOptions opts) : normalized_shape(c), options(opts) {
  DPLAB_CHECK(c > 0, "LayerNorm: expected normalized_shape > 0, got {}", c);
  DPLAB_CHECK(opts.eps > 0.0, "LayerNorm: expected eps > 0, got {}", opts.eps);
  if (options.elementwise_affine) {
    weight = register_parameter("weight", init::new_tensor({c}));
    if (options.bias) bias = register_parameter("bias", init::new_tensor({c}));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  DPLAB_CHECK(x.dim() >= 1 && x.size(-1) == normalized_shape,
              "LayerNorm({}): expected input [..., {}], got {}", normalized_shape, normalized_shape,
              shape_str(x.shape()));
  return layer_norm(x, weight, bias, static_cast<float>(options.eps));
}

std::string LayerNorm::name() const {
  return fmt::format("LayerNorm(({},), eps={}, elementwise_affine={})", normalized_shape,
                     options.eps, options.elementwise_affine);
}

std::shared_ptr<Module> LayerNorm::make_empty_copy() const {
  return std::make_shared<LayerNorm>(normalized_shape, options);
}

// ---------------------------------------------------------------------------- attention

CausalSelfAttention::CausalSelfAttention(int64_t c, int64_t h, TransformerOptions opts)
    : n_embd(c), n_head(h), options(opts) {
  DPLAB_CHECK(c > 0 && h > 0 && c % h == 0,
              "CausalSelfAttention: expected n_embd divisible by n_head (each head gets "
              "n_embd / n_head dims), got n_embd {} and n_head {}",
              c, h);
  const LinearOptions linear{.bias = opts.bias};
  c_attn = register_module("c_attn", std::make_shared<Linear>(c, 3 * c, linear));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c, c, linear));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  DPLAB_CHECK(x.dim() == 3 && x.size(2) == n_embd,
              "CausalSelfAttention(n_embd={}): expected input [B, T, {}], got {}", n_embd, n_embd,
              shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), H = n_head, D = n_embd / n_head;
  const auto p = static_cast<float>(options.dropout);

  // c_attn's 3C outputs are [q | k | v], each C = H * D. Cut them into heads: [B, T, 3, H, D],
  // then bring (which, head) to the front, [3, B, H, T, D] (permute: one copy), so q, k and v
  // are three slices along dim 0 (views) and each head's [T, D] rows are contiguous.
  Tensor qkv = permute(reshape(c_attn->forward(x), {B, T, 3, H, D}), {2, 0, 3, 1, 4});
  std::vector<Tensor> parts = chunk(qkv, 3);
  Tensor q = reshape(parts[0], {B, H, T, D});
  Tensor k = reshape(parts[1], {B, H, T, D});
  Tensor v = reshape(parts[2], {B, H, T, D});

  // scores[b, h, t, u] = q_t . k_u / sqrt(D): [B, H, T, D] @ [B, H, D, T] -> [B, H, T, T];
  // transpose_b reads k as k^T in place.
  Tensor scores = mul_scalar(matmul(q, k, {.transpose_b = true}), 1.0f / std::sqrt(float(D)));
  // Row t spreads weight over u <= t only: position t never sees a later token.
  Tensor weights = dropout(causal_softmax(scores), p, is_training(), options.generator);
  Tensor y = matmul(weights, v);  // [B, H, T, T] @ [B, H, T, D] -> [B, H, T, D]

  // Heads back side by side: [B, T, H, D] (one copy) -> [B, T, C] (a view), then mixed.
  y = reshape(permute(y, {0, 2, 1, 3}), {B, T, n_embd});
  return dropout(c_proj->forward(y), p, is_training(), options.generator);
}

std::shared_ptr<Module> CausalSelfAttention::make_empty_copy() const {
  return std::make_shared<CausalSelfAttention>(n_embd, n_head, options);
}

// ---------------------------------------------------------------------------- MLP

MLPBlock::MLPBlock(int64_t c, TransformerOptions opts) : n_embd(c), options(opts) {
  DPLAB_CHECK(c > 0, "MLPBlock: expected n_embd > 0, got {}", c);
  const LinearOptions linear{.bias = opts.bias};
  c_fc = register_module("c_fc", std::make_shared<Linear>(c, 4 * c, linear));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * c, c, linear));
}

Tensor MLPBlock::forward(const Tensor& x) {
  // GPT-2 was trained with GELU's tanh approximation; using it keeps its weights' meaning.
  Tensor hidden = gelu(c_fc->forward(x), GeluApproximation::Tanh);
  return dropout(c_proj->forward(hidden), static_cast<float>(options.dropout), is_training(),
                 options.generator);
}

std::shared_ptr<Module> MLPBlock::make_empty_copy() const {
  return std::make_shared<MLPBlock>(n_embd, options);
}

// ---------------------------------------------------------------------------- block

TransformerBlock::TransformerBlock(int64_t c, int64_t h, TransformerOptions opts)
    : n_embd(c), n_head(h), options(opts) {
  const LayerNormOptions ln{.bias = opts.bias};
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c, ln));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c, h, opts));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c, ln));
  mlp = register_module("mlp", std::make_shared<MLPBlock>(c, opts));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor r = add(x, attn->forward(ln_1->forward(x)));
  return add(r, mlp->forward(ln_2->forward(r)));
}

std::shared_ptr<Module> TransformerBlock::make_empty_copy() const {
  return std::make_shared<TransformerBlock>(n_embd, n_head, options);
}

}  // namespace dplab::nn
