// matmul.cpp: matrix products on the backend's GEMM, row-major throughout.
// Backward of C = A B:  dA = dC B^T,  dB = A^T dC  (transposes are GEMM flags, not copies).
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

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  if (amp::autocast_dtype()) {  // autocast's low-precision list (autocast.h)
    Tensor a = amp::to_autocast_dtype(a_in), b = amp::to_autocast_dtype(b_in);
    amp::AutocastSuspend inside;
    return matmul(a, b);
  }
  check_floating("matmul", a_in);
  check_floating("matmul", b_in);
  const std::vector<Tensor> ab = common_dtype({a_in, b_in});
  const Tensor &a = ab[0], &b = ab[1];
  check_same_device("matmul", a, b);
  DPLAB_CHECK(((a.dim() == 2 || a.dim() == 3) && b.dim() == 2) || (a.dim() == 3 && b.dim() == 3),
              "matmul: supports [M,K]@[K,N], [B,M,K]@[K,N] and [B,M,K]@[B,K,N]; got {} @ {}",
              shape_str(a.shape()), shape_str(b.shape()));
  bool batched = a.dim() == 3, b_batched = b.dim() == 3;
  int64_t batch = batched ? a.size(0) : 1, M = a.size(-2), K = a.size(-1), N = b.size(-1);
  DPLAB_CHECK(b.size(-2) == K, "matmul: inner dims differ: a is {}, b is {}", shape_str(a.shape()),
              shape_str(b.shape()));
  DPLAB_CHECK(!b_batched || b.size(0) == batch, "matmul: batch sizes differ: a is {}, b is {}",
              shape_str(a.shape()), shape_str(b.shape()));
  Shape out_shape = batched ? Shape{batch, M, N} : Shape{M, N};
  Tensor out = Tensor::empty(out_shape, a.options());
  gemm_into(a, false, batched, b, false, b_batched, out, batch, M, N, K, 0.0f);

  return record(out, "MatmulBackward", {a, b},
                [a, b, batched, b_batched, batch, M, N, K](const Tensor& g) {
    Tensor ga, gb;
    if (a.requires_grad()) {  // dA[M,K] = dC[M,N] B^T
      ga = Tensor::empty(a.shape(), a.options());
      gemm_into(g, false, true, b, true, b_batched, ga, batch, M, K, N, 0.0f);
    }
    if (b.requires_grad()) {
      gb = Tensor::empty(b.shape(), b.options());
      if (b_batched) {  // dB[K,N] = A^T dC, per batch entry
        gemm_into(a, true, true, g, false, true, gb, batch, K, N, M, 0.0f);
      } else {  // B is shared by the batch: dB = sum_b A_b^T dC_b = A^T dC over B*M rows
        gemm_into(a, true, false, g, false, false, gb, 1, K, N, batch * M, 0.0f);
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
