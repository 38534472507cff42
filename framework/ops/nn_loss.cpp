// nn_loss.cpp: softmax, log_softmax and the losses built on them (nll_loss, cross_entropy,
// mse_loss). The softmax family works on rows: the backend sees [rows, cols] with the
// reduced dim last, so a softmax over another dim is permute -> softmax -> permute back,
// and autograd composes the three. Reductions (mean / sum) are the ordinary ops of
// reduce.cpp applied to the per-row losses, so their backward comes for free.
// Read next: nn_conv.cpp (conv and pooling), nn_norm.cpp (batch norm, dropout).
#include "framework/ops/autocast.h"
#include "framework/ops/lowp.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

// softmax over the last dim of x viewed as [rows, cols].
Tensor softmax_last(const Tensor& x, bool log) {
  int64_t cols = x.size(-1);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::empty(x.shape(), x.options());
  if (out.numel() > 0) backend_of(x).softmax(fptr(x), fptr(out), rows, cols, log);
  // The closure keeps the output (not the input): both derivatives are written in y.
  // A detached handle, so the node does not hold the tensor that holds the node.
  Tensor y = out.detach();
  // softmax:     dx = y * (g - sum_j(g_j y_j))
  // log_softmax: dx = g - exp(y) * sum_j(g_j)
  return record(out, log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x},
                [y, rows, cols, log](const Tensor& g) {
    Tensor gx = Tensor::empty(y.shape(), y.options());
    if (gx.numel() > 0) backend_of(y).softmax_backward(fptr(g), fptr(y), fptr(gx), rows, cols, log);
    return std::vector<Tensor>{gx};
  });
}

// Moves dim d last (a permutation), runs the row softmax, and moves it back.
Tensor softmax_any(const char* op, const Tensor& x, int64_t dim, bool log) {
  check_float(op, x);
  DPLAB_CHECK(x.dim() >= 1, "{}: expected a tensor with at least 1 dim, got shape {}", op,
              shape_str(x.shape()));
  int64_t d = normalize_dim(op, dim, x.dim());
  int64_t last = x.dim() - 1;
  if (d == last) return softmax_last(x, log);
  // Swapping d and last is its own inverse, so the same permutation brings it back.
  std::vector<int64_t> perm(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) perm[i] = i;
  std::swap(perm[d], perm[last]);
  return permute(softmax_last(permute(x, perm), log), perm);
}

Tensor reduce_loss(const Tensor& per_element, Reduction r) {
  switch (r) {
    case Reduction::None: return per_element;
    case Reduction::Sum: return sum(per_element);
    case Reduction::Mean: return mean(per_element);
  }
  DPLAB_FAIL("loss: unknown reduction {}", static_cast<int>(r));
}

// The checks nll_loss and cross_entropy share: scores [N, C] and int64 labels [N].
void check_scores_and_target(const char* op, const char* what, const Tensor& scores,
                             const Tensor& target) {
  check_float(op, scores);
  check_defined(op, target);
  DPLAB_CHECK(scores.dim() == 2, "{}: expected {} of shape [N, C], got {}", op, what,
              shape_str(scores.shape()));
  DPLAB_CHECK(target.dtype() == DType::Int64,
              "{}: expected int64 class indices as target, got {} of shape {} ({} is {})", op,
              dtype_name(target.dtype()), shape_str(target.shape()), what,
              shape_str(scores.shape()));
  DPLAB_CHECK(target.dim() == 1 && target.size(0) == scores.size(0),
              "{}: expected target of shape [{}] for {} {}, got target {}", op, scores.size(0),
              what, shape_str(scores.shape()), shape_str(target.shape()));
  check_same_device(op, scores, target);
}

}  // namespace

// Every op of this file computes in float32 (autocast's float32 list, lowp.h's
// needs_float32): 16-bit inputs are cast up, and the result cast back. The casts are
// differentiable; nothing 16-bit reaches a kernel.

Tensor softmax(const Tensor& x, int64_t dim) {
  if (needs_float32({x})) {
    const DType t = float32_op_result({x});
    amp::AutocastSuspend inside;
    return cast(softmax(amp::to_float32(x), dim), t);
  }
  return softmax_any("softmax", x, dim, false);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (needs_float32({x})) {
    const DType t = float32_op_result({x});
    amp::AutocastSuspend inside;
    return cast(log_softmax(amp::to_float32(x), dim), t);
  }
  return softmax_any("log_softmax", x, dim, true);
}

// loss_i = -logp[i, target_i]; the backend checks every target lies in [0, C).
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r) {
  if (needs_float32({logp})) {
    const DType t = float32_op_result({logp});
    amp::AutocastSuspend inside;
    return cast(nll_loss(amp::to_float32(logp), target, r), t);
  }
  check_scores_and_target("nll_loss", "log-probabilities", logp, target);
  int64_t rows = logp.size(0), cols = logp.size(1);
  Tensor per_row = Tensor::empty({rows}, logp.options());
  if (rows > 0) backend_of(logp).nll_loss(fptr(logp), iptr(target), fptr(per_row), rows, cols);
  // d loss_i / d logp[i, j] = -1 if j == target_i else 0
  per_row = record(per_row, "NllLossBackward", {logp}, [target, rows, cols](const Tensor& g) {
    Tensor glogp = Tensor::empty({rows, cols}, g.options());
    if (glogp.numel() > 0)
      backend_of(g).nll_loss_backward(fptr(g), iptr(target), fptr(glogp), rows, cols);
    return std::vector<Tensor>{glogp};
  });
  return reduce_loss(per_row, r);
}

// cross_entropy(z, t) = -log softmax(z)[t] = nll_loss(log_softmax(z), t); the gradient
// through both is softmax(z) - onehot(t), assembled by autograd from the two backwards.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction r) {
  if (needs_float32({logits})) {
    const DType t = float32_op_result({logits});
    amp::AutocastSuspend inside;
    return cast(cross_entropy(amp::to_float32(logits), target, r), t);
  }
  check_scores_and_target("cross_entropy", "logits", logits, target);
  return nll_loss(log_softmax(logits, 1), target, r);
}

// (input - target)^2, elementwise. No broadcasting: a [N] prediction against a [N, 1]
// target would silently become [N, N], the classic regression bug, so shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r) {
  if (needs_float32({input, target})) {
    const DType t = float32_op_result({input, target});
    amp::AutocastSuspend inside;
    return cast(mse_loss(amp::to_float32(input), amp::to_float32(target), r), t);
  }
  check_float("mse_loss", input);
  check_float("mse_loss", target);
  check_same_device("mse_loss", input, target);
  DPLAB_CHECK(input.shape() == target.shape(),
              "mse_loss: input and target shapes must match exactly (no broadcasting), got input "
              "{} and target {}",
              shape_str(input.shape()), shape_str(target.shape()));
  Tensor diff = sub(input, target);
  return reduce_loss(mul(diff, diff), r);
}

}  // namespace dplab
