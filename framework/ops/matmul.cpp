// matmul.cpp: matrix products on the backend's GEMM, row-major throughout.
// Backward of C = A B:  dA = dC B^T,  dB = A^T dC  (transposes are GEMM flags, not copies).
// A batch of products ([B, H, T, D] @ [B, H, D, T], attention's) is one batched GEMM over
// contiguous matrices: the batch dims flatten into one count, with nothing allocated per entry.
// linear() is y = x W^T + b in one GEMM (bias pre-filled, beta = 1): nn::Linear's forward.
// float16 / bfloat16 operands run Backend::gemm_lowp (float32 accumulation, C rounded once);
// inside autocast both ops cast their float32 inputs to the autocast dtype first.
// Read next: shape.cpp.
#include "framework/ops/autocast.h"
#include "framework/ops/lowp.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

// c[batch, M, N] (+)= op(a) op(b); a_batched/b_batched say whether a or b has a batch dim.
void gemm_into(const Tensor& a, bool trans_a, bool a_batched, const Tensor& b, bool trans_b,
               bool b_batched, Tensor& c, int64_t batch, int64_t M, int64_t N, int64_t K,
               float beta) {
  if (c.numel() == 0) return;
  if (K == 0) {  // an empty sum: c = beta * c
    if (beta == 0.0f) c.detach().zero_();
    return;
  }
  GemmArgs g{.batch = batch,
             .M = M,
             .N = N,
             .K = K,
             .trans_a = trans_a,
             .trans_b = trans_b,
             .stride_a = a_batched ? M * K : 0,
             .stride_b = b_batched ? K * N : 0,
             .stride_c = M * N,
             .alpha = 1.0f,
             .beta = beta};
  if (is_low_precision(c.dtype()))
    return backend_of(a).gemm_lowp(g, c.dtype(), a.raw_data(), b.raw_data(), c.raw_data());
  backend_of(a).gemm(g, fptr(a), fptr(b), fptr(c));
}

// The batch dims of x: all but the last two.
Shape batch_dims(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 2); }
int64_t batch_numel(const Tensor& x) { return shape_numel(batch_dims(x)); }

// The batch of a product: a's and b's batch dims broadcast (NumPy's rule).
Shape matmul_batch_shape(const Tensor& a, const Tensor& b) {
  const Shape ab = batch_dims(a), bb = batch_dims(b);
  try {
    return broadcast_shapes(ab, bb);
  } catch (const Error&) {
    DPLAB_FAIL("matmul: batch dims {} and {} do not broadcast (a is {}, b is {})", shape_str(ab),
               shape_str(bb), shape_str(a.shape()), shape_str(b.shape()));
  }
}

// The GEMM steps an operand through the batch (stride: one matrix) or reads the same matrix
// for every entry (stride 0). An operand broadcast along some batch dims only, as [B, 1, M, K]
// against [B, H, K, N], fits neither: it is expanded to the full batch, one copy (expand's
// backward sums its gradient back).
Tensor fit_batch(const Tensor& x, const Shape& batch_shape) {
  const int64_t n = batch_numel(x);
  if (n == 1 || n == shape_numel(batch_shape)) return x;
  Shape full = batch_shape;
  full.push_back(x.size(-2));
  full.push_back(x.size(-1));
  return expand(x, full);
}

// Where a gradient is computed: x's own shape when x steps through the batch, else one
// [rows, cols] matrix per batch entry, summed by sum_shared.
Tensor gradient_buffer(const Tensor& x, bool batched, int64_t batch, int64_t rows, int64_t cols) {
  return Tensor::empty(batched ? x.shape() : Shape{batch, rows, cols}, x.options());
}
Tensor sum_shared(const Tensor& g, const Tensor& x, bool batched) {
  return batched ? g : reshape(sum(g, {0}), x.shape());
}

// Operands of one dtype: the promotion of the floating inputs (float16 with float32 gives
// float32), each cast differentiably. Returns the inputs unchanged when they agree.
std::vector<Tensor> common_dtype(const std::vector<Tensor>& in) {
  std::optional<DType> t = lowp_result_dtype(in);
  if (!t) return in;
  std::vector<Tensor> out;
  for (const Tensor& x : in) out.push_back(x.defined() ? cast(x, *t) : x);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, MatmulOptions o) {
  if (amp::autocast_dtype()) {  // autocast's low-precision list (autocast.h)
    Tensor a = amp::to_autocast_dtype(a_in), b = amp::to_autocast_dtype(b_in);
    amp::AutocastSuspend inside;
    return matmul(a, b, o);
  }
  check_floating("matmul", a_in);
  check_floating("matmul", b_in);
  const std::vector<Tensor> ab = common_dtype({a_in, b_in});
  check_same_device("matmul", ab[0], ab[1]);
  DPLAB_CHECK(
      ab[0].dim() >= 2 && ab[1].dim() >= 2,
      "matmul: expected [..., M, K] @ [..., K, N], operands of at least 2 dims; got {} @ {}",
      shape_str(ab[0].shape()), shape_str(ab[1].shape()));
  const bool ta = o.transpose_a, tb = o.transpose_b;
  const int64_t M = ab[0].size(ta ? -1 : -2), K = ab[0].size(ta ? -2 : -1);
  const int64_t N = ab[1].size(tb ? -2 : -1);
  DPLAB_CHECK(ab[1].size(tb ? -1 : -2) == K, "matmul: inner dims differ: a is {}{}, b is {}{}",
              shape_str(ab[0].shape()), ta ? " (transposed)" : "", shape_str(ab[1].shape()),
              tb ? " (transposed)" : "");
  const Shape batch_shape = matmul_batch_shape(ab[0], ab[1]);
  const int64_t batch = shape_numel(batch_shape);
  const Tensor a = fit_batch(ab[0], batch_shape), b = fit_batch(ab[1], batch_shape);
  const bool a_batched = batch_numel(a) == batch, b_batched = batch_numel(b) == batch;
  Shape out_shape = batch_shape;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, a.options());
  gemm_into(a, ta, a_batched, b, tb, b_batched, out, batch, M, N, K, 0.0f);

  // C = op(A) op(B):  d op(A) = dC op(B)^T,  d op(B) = op(A)^T dC. Where an operand is stored
  // transposed, its gradient is the transpose of that: dA = op(B) dC^T, dB = dC^T op(A).
  // Every transpose is a GEMM flag. An operand shared by the batch sums its gradient over it.
  return record(out, "MatmulBackward", {a, b},
                [a, b, ta, tb, a_batched, b_batched, batch, M, N, K](const Tensor& g) {
    Tensor ga, gb;
    if (a.requires_grad()) {
      ga = gradient_buffer(a, a_batched, batch, ta ? K : M, ta ? M : K);
      if (ta) gemm_into(b, tb, b_batched, g, true, true, ga, batch, K, M, N, 0.0f);
      else gemm_into(g, false, true, b, !tb, b_batched, ga, batch, M, K, N, 0.0f);
      ga = sum_shared(ga, a, a_batched);
    }
    if (b.requires_grad()) {
      if (!b_batched && a_batched && !ta) {
        // B is shared and A's rows lie back to back: the sum over the batch is one GEMM with
        // batch*M rows, dB = A^T dC ([K, batch*M] @ [batch*M, N]).
        gb = Tensor::empty(b.shape(), b.options());
        if (tb) gemm_into(g, true, false, a, false, false, gb, 1, N, K, batch * M, 0.0f);
        else gemm_into(a, true, false, g, false, false, gb, 1, K, N, batch * M, 0.0f);
      } else {
        gb = gradient_buffer(b, b_batched, batch, tb ? N : K, tb ? K : N);
        if (tb) gemm_into(g, true, true, a, ta, a_batched, gb, batch, N, K, M, 0.0f);
        else gemm_into(a, !ta, a_batched, g, false, true, gb, batch, K, N, M, 0.0f);
        gb = sum_shared(gb, b, b_batched);
      }
    }
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  if (amp::autocast_dtype()) {
    Tensor x = amp::to_autocast_dtype(x_in), w = amp::to_autocast_dtype(weight_in),
           b = amp::to_autocast_dtype(bias_in);
    amp::AutocastSuspend inside;
    return linear(x, w, b);
  }
  check_floating("linear", x_in);
  check_floating("linear", weight_in);
  if (bias_in.defined()) check_floating("linear", bias_in);
  const std::vector<Tensor> xwb = common_dtype({x_in, weight_in, bias_in});
  const Tensor &x = xwb[0], &weight = xwb[1], &bias = xwb[2];
  check_same_device("linear", x, weight);
  DPLAB_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
              "linear: expected input [..., {}] for weight [out, in] = {}, got input {}",
              weight.dim() == 2 ? weight.size(1) : -1, shape_str(weight.shape()),
              shape_str(x.shape()));
  int64_t in = weight.size(1), out_f = weight.size(0), rows = x.numel() / std::max<int64_t>(in, 1);
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, x.options());
  float beta = 0.0f;
  if (bias.defined()) {
    check_same_device("linear", x, bias);
    DPLAB_CHECK(bias.dim() == 1 && bias.size(0) == out_f, "linear: bias must be [{}], got {}",
                out_f, shape_str(bias.shape()));
    backend_of(x).strided_copy(x.dtype(), bias.raw_data(), broadcast_layout({out_f}, {rows, out_f}),
                               out.raw_data());
    beta = 1.0f;
  }
  // y[rows, out] = x[rows, in] W^T  (W stored [out, in]: trans_b)
  gemm_into(x, false, false, weight, true, false, out, 1, rows, out_f, in, beta);

  return record(out, "LinearBackward", {x, weight, bias},
                [x, weight, bias, rows, in, out_f](const Tensor& g) {
    Tensor gx, gw, gb;
    if (x.requires_grad()) {  // dx[rows, in] = g[rows, out] W[out, in]
      gx = Tensor::empty(x.shape(), x.options());
      gemm_into(g, false, false, weight, false, false, gx, 1, rows, in, out_f, 0.0f);
    }
    if (weight.requires_grad()) {  // dW[out, in] = g^T[out, rows] x[rows, in]
      gw = Tensor::empty(weight.shape(), weight.options());
      gemm_into(g, true, false, x, false, false, gw, 1, out_f, in, rows, 0.0f);
    }
    if (bias.defined() && bias.requires_grad()) gb = sum(reshape(g, {rows, out_f}), {0});
    return std::vector<Tensor>{gx, gw, gb};
  });
}

}  // namespace dplab
