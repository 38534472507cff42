// nn_transformer.cpp: the ops a transformer adds to an MLP's: layer norm, embedding lookup and
// the causal softmax of attention scores, each one kernel forward and one backward
// (backend.h's causal_softmax, layer_norm, index_rows / index_add_rows). GELU sits with the
// other activations (elementwise.cpp); batched and transposed products are matmul's.
//
// Causal self-attention from ops.h, x [B, T, C] with H heads of D = C / H dims, and what each
// step costs in copies (dplab's tensors are contiguous: a permute is a copy, a reshape or a
// slice along dim 0 is a view):
//   qkv = linear(x, w_qkv, b_qkv)                                  [B, T, 3C]
//   qkv = permute(reshape(qkv, {B, T, 3, H, D}), {2, 0, 3, 1, 4})  [3, B, H, T, D]  one copy
//   q, k, v = chunk(qkv, 3), each reshaped to [B, H, T, D]          views
//   s = mul_scalar(matmul(q, k, {.transpose_b = true}), 1/sqrt(D)) [B, H, T, T]    no k^T copy
//   y = matmul(causal_softmax(s), v)                               [B, H, T, D]
//   y = reshape(permute(y, {0, 2, 1, 3}), {B, T, C})               one copy
// (tests/ops/test_transformer_ops.cpp runs exactly this against a float64 loop.)
// Read next: nn/transformer.h (the modules built on these), backend/cpu/cpu_transformer.cpp
// (the kernels).
#include "framework/ops/autocast.h"
#include "framework/ops/lowp.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

void check_norm_vector(const char* what, const Tensor& t, const Tensor& x) {
  check_float("layer_norm", t);
  check_same_device("layer_norm", x, t);
  DPLAB_CHECK(t.dim() == 1 && t.size(0) == x.size(-1),
              "layer_norm: {} must be [{}] for input {} (normalised over its last dim), got {}",
              what, x.size(-1), shape_str(x.shape()), shape_str(t.shape()));
}

}  // namespace

// Per row of C values: y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps).
// Layer norm is on autocast's float32 list: 16-bit inputs are cast up (lowp.h).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  if (needs_float32({x, weight, bias})) {
    const DType t = float32_op_result({x, weight, bias});
    amp::AutocastSuspend inside;
    return cast(layer_norm(amp::to_float32(x), amp::to_float32(weight), amp::to_float32(bias), eps),
                t);
  }
  check_float("layer_norm", x);
  DPLAB_CHECK(x.dim() >= 1 && x.size(-1) > 0,
              "layer_norm: expected an input [..., C] with C > 0 (normalised over C), got {}",
              shape_str(x.shape()));
  DPLAB_CHECK(eps > 0.0f, "layer_norm: eps must be > 0, got {}", eps);
  if (weight.defined()) check_norm_vector("weight", weight, x);
  if (bias.defined()) check_norm_vector("bias", bias, x);
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  Tensor y = Tensor::empty(x.shape(), x.options());
  Tensor mean = Tensor::empty({rows}, x.options()), rstd = Tensor::empty({rows}, x.options());
  const float* w = weight.defined() ? fptr(weight) : nullptr;
  const float* b = bias.defined() ? fptr(bias) : nullptr;
  backend_of(x).layer_norm(fptr(x), w, b, fptr(y), fptr(mean), fptr(rstd), rows, cols, eps);

  // xhat = (x - mean) rstd, gh = g * weight. Through mean and var, every x of the row moves
  // every xhat, which leaves (per row, means over its C values)
  //   dx = rstd (gh - mean(gh) - xhat mean(gh xhat))
  //   dweight = sum_rows g xhat,  dbias = sum_rows g
  return record(y, "LayerNormBackward", {x, weight, bias},
                [x, weight, bias, mean, rstd, rows, cols](const Tensor& g) {
    Tensor gx, gw, gb;
    if (x.requires_grad()) gx = Tensor::empty(x.shape(), x.options());
    if (weight.defined() && weight.requires_grad()) gw = Tensor::empty({cols}, x.options());
    if (bias.defined() && bias.requires_grad()) gb = Tensor::empty({cols}, x.options());
    auto ptr = [](const Tensor& t) { return t.defined() ? fptr(t) : nullptr; };
    backend_of(g).layer_norm_backward(fptr(g), fptr(x), ptr(weight), fptr(mean), fptr(rstd),
                                      ptr(gx), ptr(gw), ptr(gb), rows, cols);
    return std::vector<Tensor>{gx, gw, gb};
  });
}

// out[i..., :] = weight[ids[i...], :]. The rows move as raw bytes, so a 16-bit weight gives a
// 16-bit output; the gradient is summed in float32 and rounded once.
Tensor embedding(const Tensor& ids, const Tensor& weight, std::optional<int64_t> padding_idx) {
  check_int64("embedding", ids);
  check_floating("embedding", weight);
  check_same_device("embedding", ids, weight);
  DPLAB_CHECK(weight.dim() == 2, "embedding: expected weight [num_embeddings, dim], got {}",
              shape_str(weight.shape()));
  const int64_t V = weight.size(0), D = weight.size(1);
  std::optional<int64_t> pad;
  if (padding_idx) {
    pad = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
    DPLAB_CHECK(*pad >= 0 && *pad < V,
                "embedding: padding_idx must lie in [-{}, {}) for weight {}, got {}", V, V,
                shape_str(weight.shape()), *padding_idx);
  }
  Shape shape = ids.shape();
  shape.push_back(D);
  Tensor out = Tensor::empty(shape, weight.options());
  if (out.numel() > 0) {
    try {  // the backend checks every id on its device (a GPU flags it, then the host throws)
      backend_of(weight).index_rows(weight.dtype(), weight.raw_data(), V, iptr(ids), ids.numel(), D,
                                    out.raw_data());
    } catch (const Error& e) {
      DPLAB_FAIL("embedding: expected every id in [0, {}), the rows of weight {}; ids {}: {}", V,
                 shape_str(weight.shape()), shape_str(ids.shape()), e.what());
    }
  }
  // d out[i, :] / d weight[ids[i], :] = identity: each row of g adds into the row it was
  // read from (index_add: a repeated id sums its rows), and the padding row gets none.
  return record(out, "EmbeddingBackward", {weight},
                [ids, V, D, pad, dtype = weight.dtype()](const Tensor& g) {
    const Tensor g32 = raw_cast(g, DType::Float32);
    Tensor grad = zeros({V, D}, {.device = g.device()});
    Backend& be = backend_of(g);
    if (g32.numel() > 0) be.index_add_rows(fptr(g32), iptr(ids), ids.numel(), D, fptr(grad));
    if (pad && D > 0) be.fill(DType::Float32, fptr(grad) + *pad * D, D, 0.0);
    return std::vector<Tensor>{raw_cast(grad, dtype)};
  });
}

// softmax(scores + mask) with mask = -inf where key j > i + (k - q), in one kernel that never
// reads the masked scores (backend.h). Softmax is on autocast's float32 list.
Tensor causal_softmax(const Tensor& scores) {
  if (needs_float32({scores})) {
    const DType t = float32_op_result({scores});
    amp::AutocastSuspend inside;
    return cast(causal_softmax(amp::to_float32(scores)), t);
  }
  check_float("causal_softmax", scores);
  DPLAB_CHECK(scores.dim() >= 2,
              "causal_softmax: expected scores [..., q, k] (queries by keys), got shape {}",
              shape_str(scores.shape()));
  const int64_t q = scores.size(-2), k = scores.size(-1);
  DPLAB_CHECK(q <= k,
              "causal_softmax: expected no more queries than keys (q <= k: every query sees a "
              "key), got scores {} with q = {}, k = {}",
              shape_str(scores.shape()), q, k);
  const int64_t batch = shape_numel(Shape(scores.shape().begin(), scores.shape().end() - 2));
  Tensor out = Tensor::empty(scores.shape(), scores.options());
  if (out.numel() > 0) backend_of(scores).causal_softmax(fptr(scores), fptr(out), batch, q, k);
  // softmax's backward, dx = y (g - sum_j g_j y_j), row by row: a masked y is 0, so its
  // gradient is 0 exactly, and the visible part is the backward of a softmax over it alone.
  Tensor y = out.detach();
  return record(out, "CausalSoftmaxBackward", {scores}, [y, rows = batch * q, k](const Tensor& g) {
    Tensor gx = Tensor::empty(y.shape(), y.options());
    if (gx.numel() > 0) backend_of(y).softmax_backward(fptr(g), fptr(y), fptr(gx), rows, k, false);
    return std::vector<Tensor>{gx};
  });
}

}  // namespace dplab
