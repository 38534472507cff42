// cuda_backend_kernels.cpp: CudaBackend's elementwise, reduction, softmax (causal too), layer
// norm, indexing, convolution, pooling and optimizer kernels: argument checks (the same as the
// CPU backend's), translation of backend.h's structs to cuda_kernels.h's plain mirrors, and a
// launch on the stream of the logical device that owns the output (fill, unary and
// reduce_into, the kernels collectives use, go on its comm stream inside a CommStreamScope).
// Index-validating kernels are followed by take_index_errors(): a stream sync plus 16 bytes
// back, so an out-of-range label throws here, naming the label, instead of reading garbage.
// Read next: cuda_elementwise.cu (kernels), then tests/backend_cuda/test_cuda_kernels.cpp.
#include <cmath>

#include "framework/backend/cuda/cuda_allocator.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/backend/cuda/cuda_half.h"
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/error.h"

namespace dplab {

using cuda::bind_owner;
using cuda::LogicalDevice;

// The mirrored enums must keep backend.h's order: kernels receive them as plain ints.
static_assert(static_cast<int>(UnaryOp::GtScalar) == static_cast<int>(cuda::KUnary::GtScalar));
static_assert(static_cast<int>(UnaryOp::PowScalar) == static_cast<int>(cuda::KUnary::PowScalar));
static_assert(static_cast<int>(UnaryOp::GeluTanh) == static_cast<int>(cuda::KUnary::GeluTanh));
static_assert(static_cast<int>(BinaryOp::TanhGrad) == static_cast<int>(cuda::KBinary::TanhGrad));
static_assert(static_cast<int>(BinaryOp::GeluTanhGrad) ==
              static_cast<int>(cuda::KBinary::GeluTanhGrad));
static_assert(static_cast<int>(BinaryOp::Eq) == static_cast<int>(cuda::KBinary::Eq));
static_assert(static_cast<int>(ReduceKind::ArgMax) == static_cast<int>(cuda::KReduce::ArgMax));
static_assert(cuda::kKernelMaxDims == kMaxDims);

namespace {

cuda::KStrided to_kernel(const Strided& s) {
  cuda::KStrided k;
  k.ndim = s.ndim;
  for (int d = 0; d < s.ndim; ++d) {
    k.shape[d] = s.shape[d];
    k.strides[d] = s.strides[d];
  }
  return k;
}

cuda::KWindow to_kernel(const Window2d& w) {
  return {w.N, w.C, w.H, w.W, w.kh, w.kw, w.stride, w.pad, w.out_h, w.out_w};
}

// Throws when the kernel just launched on dev flagged an index outside [0, hi)
// (hi < 0: the kernel only knew to check >= 0).
void check_indices(LogicalDevice& dev, const char* what, const char* name, int64_t hi) {
  int64_t first = 0;
  const unsigned long long bad = cuda::take_index_errors(dev, &first);
  if (hi >= 0) {
    DPLAB_CHECK(bad == 0, "{}: expected every {} in [0, {}), got {} ({} bad in all)", what, name,
                hi, first, bad);
  } else {
    DPLAB_CHECK(bad == 0, "{}: expected every {} >= 0, got {} ({} bad in all)", what, name, first,
                bad);
  }
}

}  // namespace

void CudaBackend::fill(DType t, void* out, int64_t n, double value) {
  if (n <= 0) return;
  LogicalDevice& dev = bind_owner(out, "fill");
  if (t == DType::Float16)
    return CUDA_CHECK(cuda::launch_fill_f16(static_cast<uint16_t*>(out), n,
                                            static_cast<float>(value), cuda::stream_for(dev)));
  if (t == DType::BFloat16)
    return CUDA_CHECK(cuda::launch_fill_bf16(static_cast<uint16_t*>(out), n,
                                             static_cast<float>(value), cuda::stream_for(dev)));
  if (t == DType::Float32) {
    CUDA_CHECK(cuda::launch_fill_f32(static_cast<float*>(out), n, static_cast<float>(value),
                                     cuda::stream_for(dev)));
  } else {
    CUDA_CHECK(cuda::launch_fill_i64(static_cast<int64_t*>(out), n, static_cast<int64_t>(value),
                                     cuda::stream_for(dev)));
  }
}

void CudaBackend::strided_copy(DType t, const void* src, const Strided& layout, void* out) {
  if (layout.numel() == 0) return;
  LogicalDevice& dev = bind_owner(out, "strided_copy");
  CUDA_CHECK(cuda::launch_strided_copy(static_cast<int>(element_size(t)), src, to_kernel(layout),
                                       out, dev.stream));
}

void CudaBackend::cast(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (n <= 0) return;
  LogicalDevice& dev = bind_owner(dst, "cast");
  if (from == to) {
    if (src != dst) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * element_size(to),
                                 cudaMemcpyDeviceToDevice, dev.stream));
    }
  } else if (is_low_precision(from) || is_low_precision(to)) {  // float32 <-> 16-bit (cuda_half.cu)
    DPLAB_CHECK(
        from == DType::Float32 || to == DType::Float32,
        "cast: on CUDA, float16 and bfloat16 convert to and from float32 only, got {} -> {}",
        dtype_name(from), dtype_name(to));
    const auto* s16 = static_cast<const uint16_t*>(src);
    auto* d16 = static_cast<uint16_t*>(dst);
    const auto* s32 = static_cast<const float*>(src);
    auto* d32 = static_cast<float*>(dst);
    if (to == DType::Float16) CUDA_CHECK(cuda::launch_cast_f32_f16(s32, d16, n, dev.stream));
    else if (to == DType::BFloat16) CUDA_CHECK(cuda::launch_cast_f32_bf16(s32, d16, n, dev.stream));
    else if (from == DType::Float16) CUDA_CHECK(cuda::launch_cast_f16_f32(s16, d32, n, dev.stream));
    else CUDA_CHECK(cuda::launch_cast_bf16_f32(s16, d32, n, dev.stream));
  } else if (from == DType::Float32) {
    CUDA_CHECK(cuda::launch_cast_f32_i64(static_cast<const float*>(src), static_cast<int64_t*>(dst),
                                         n, dev.stream));
  } else {
    CUDA_CHECK(cuda::launch_cast_i64_f32(static_cast<const int64_t*>(src), static_cast<float*>(dst),
                                         n, dev.stream));
  }
}

void CudaBackend::unary(UnaryOp op, const float* x, float* y, int64_t n, float scalar) {
  if (n <= 0) return;
  LogicalDevice& dev = bind_owner(y, "unary");
  CUDA_CHECK(
      cuda::launch_unary(static_cast<cuda::KUnary>(op), x, y, n, scalar, cuda::stream_for(dev)));
}

void CudaBackend::binary_kernel(BinaryOp op, const float* a, const Strided& al, const float* b,
                                const Strided& bl, float* out) {
  if (al.numel() == 0) return;
  LogicalDevice& dev = bind_owner(out, "binary");
  CUDA_CHECK(cuda::launch_binary(static_cast<cuda::KBinary>(op), a, to_kernel(al), b, to_kernel(bl),
                                 out, dev.stream));
}

void CudaBackend::reduce_into(ReduceKind op, DType t, void* dst, const void* src, int64_t n) {
  DPLAB_CHECK(op != ReduceKind::ArgMax,
              "reduce_into: expected Sum, Max or Min, got ArgMax (an index has no reduction)");
  if (n <= 0) return;
  LogicalDevice& dev = bind_owner(dst, "reduce_into");
  const auto kop = static_cast<cuda::KReduce>(op);
  cudaStream_t s = cuda::stream_for(dev);  // the comm stream inside a collective
  if (t == DType::Float16)
    return CUDA_CHECK(cuda::launch_reduce_into_f16(kop, static_cast<uint16_t*>(dst),
                                                   static_cast<const uint16_t*>(src), n, s));
  if (t == DType::BFloat16)
    return CUDA_CHECK(cuda::launch_reduce_into_bf16(kop, static_cast<uint16_t*>(dst),
                                                    static_cast<const uint16_t*>(src), n, s));
  if (t == DType::Float32) {
    CUDA_CHECK(cuda::launch_reduce_into_f32(kop, static_cast<float*>(dst),
                                            static_cast<const float*>(src), n, s));
  } else {
    CUDA_CHECK(cuda::launch_reduce_into_i64(kop, static_cast<int64_t*>(dst),
                                            static_cast<const int64_t*>(src), n, s));
  }
}

void CudaBackend::reduce_kernel(ReduceKind op, const float* x, void* out, int64_t outer, int64_t r,
                                int64_t inner) {
  if (outer == 0 || inner == 0) return;
  LogicalDevice& dev = bind_owner(out, "reduce");
  const auto kop = static_cast<cuda::KReduce>(op);
  // the two-pass shapes' partials; freed right after the launch: the block's next user is
  // queued on the same stream, after both passes (cuda_allocator.cpp)
  const std::size_t scratch_bytes = cuda::reduce_scratch_bytes(kop, outer, r, inner);
  void* scratch = scratch_bytes ? cuda::cache_allocate(dev.logical, scratch_bytes) : nullptr;
  const cudaError_t err = cuda::launch_reduce(kop, x, out, outer, r, inner, scratch, dev.stream);
  if (scratch != nullptr) cuda::cache_free(dev.logical, scratch);
  CUDA_CHECK(err);
}

void CudaBackend::softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  if (rows <= 0 || cols <= 0) return;
  LogicalDevice& dev = bind_owner(y, "softmax");
  CUDA_CHECK(cuda::launch_softmax(x, y, rows, cols, log, dev.stream));
}

void CudaBackend::softmax_backward(const float* gy, const float* y, float* gx, int64_t rows,
                                   int64_t cols, bool log) {
  if (rows <= 0 || cols <= 0) return;
  LogicalDevice& dev = bind_owner(gx, "softmax_backward");
  CUDA_CHECK(cuda::launch_softmax_backward(gy, y, gx, rows, cols, log, dev.stream));
}

void CudaBackend::causal_softmax_kernel(const float* x, float* y, int64_t batch, int64_t q,
                                        int64_t k) {
  if (batch * q <= 0 || k <= 0) return;
  LogicalDevice& dev = bind_owner(y, "causal_softmax");
  CUDA_CHECK(cuda::launch_causal_softmax(x, y, batch, q, k, dev.stream));
}

void CudaBackend::layer_norm(const float* x, const float* w, const float* b, float* y, float* mean,
                             float* rstd, int64_t rows, int64_t cols, float eps) {
  if (rows <= 0 || cols <= 0) return;
  LogicalDevice& dev = bind_owner(y, "layer_norm");
  CUDA_CHECK(cuda::launch_layer_norm(x, w, b, y, mean, rstd, rows, cols, eps, dev.stream));
}

void CudaBackend::layer_norm_backward(const float* gy, const float* x, const float* w,
                                      const float* mean, const float* rstd, float* gx, float* gw,
                                      float* gb, int64_t rows, int64_t cols) {
  float* owner = gx ? gx : gw ? gw : gb;
  if (cols <= 0 || owner == nullptr) return;
  LogicalDevice& dev = bind_owner(owner, "layer_norm_backward");
  CUDA_CHECK(
      cuda::launch_layer_norm_backward(gy, x, w, mean, rstd, gx, gw, gb, rows, cols, dev.stream));
}

void CudaBackend::nll_loss(const float* logp, const int64_t* target, float* out, int64_t rows,
                           int64_t cols) {
  if (rows <= 0) return;
  LogicalDevice& dev = bind_owner(out, "nll_loss");
  CUDA_CHECK(cuda::launch_nll_loss(logp, target, out, rows, cols, dev.err_flag, dev.stream));
  check_indices(dev, "nll_loss", "target", cols);
}

void CudaBackend::nll_loss_backward(const float* gout, const int64_t* target, float* glogp,
                                    int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  LogicalDevice& dev = bind_owner(glogp, "nll_loss_backward");
  CUDA_CHECK(
      cuda::launch_nll_loss_backward(gout, target, glogp, rows, cols, dev.err_flag, dev.stream));
  check_indices(dev, "nll_loss_backward", "target", cols);
}

void CudaBackend::index_rows(DType t, const void* src, int64_t src_rows, const int64_t* idx,
                             int64_t n_idx, int64_t row_elems, void* out) {
  if (n_idx <= 0 || row_elems <= 0) return;
  LogicalDevice& dev = bind_owner(out, "index_rows");
  CUDA_CHECK(cuda::launch_index_rows(static_cast<int>(element_size(t)), src, src_rows, idx, n_idx,
                                     row_elems, out, dev.err_flag, dev.stream));
  check_indices(dev, "index_rows", "index", src_rows);
}

void CudaBackend::index_add_rows(const float* g, const int64_t* idx, int64_t n_idx,
                                 int64_t row_elems, float* out) {
  if (n_idx <= 0 || row_elems <= 0) return;
  LogicalDevice& dev = bind_owner(out, "index_add_rows");
  CUDA_CHECK(cuda::launch_index_add_rows(g, idx, n_idx, row_elems, out, dev.err_flag, dev.stream));
  check_indices(dev, "index_add_rows", "index", -1);
}

void CudaBackend::gather_rows(const float* src, int64_t src_rows, const int64_t* idx, int64_t rows,
                              int64_t cols, float* out) {
  if (rows <= 0 || cols <= 0) return;
  LogicalDevice& dev = bind_owner(out, "gather_rows");
  CUDA_CHECK(
      cuda::launch_gather_rows(src, src_rows, idx, rows, cols, out, dev.err_flag, dev.stream));
  check_indices(dev, "gather_rows", "index", src_rows);
}

void CudaBackend::scatter_add_rows(const float* g, const int64_t* idx, int64_t rows, int64_t cols,
                                   float* out) {
  if (rows <= 0 || cols <= 0) return;
  LogicalDevice& dev = bind_owner(out, "scatter_add_rows");
  CUDA_CHECK(cuda::launch_scatter_add_rows(g, idx, rows, cols, out, dev.err_flag, dev.stream));
  check_indices(dev, "scatter_add_rows", "index", -1);
}

void CudaBackend::im2col_kernel(const float* x, const Window2d& w, float* cols) {
  if (w.N * w.C * w.out_h * w.out_w == 0) return;
  LogicalDevice& dev = bind_owner(cols, "im2col");
  CUDA_CHECK(cuda::launch_im2col(x, to_kernel(w), cols, dev.stream));
}

void CudaBackend::col2im_kernel(const float* cols, const Window2d& w, float* gx) {
  if (w.N * w.C * w.H * w.W == 0) return;
  LogicalDevice& dev = bind_owner(gx, "col2im");
  CUDA_CHECK(cuda::launch_col2im(cols, to_kernel(w), gx, dev.stream));
}

void CudaBackend::max_pool2d_kernel(const float* x, const Window2d& w, float* y, int64_t* argmax) {
  if (w.N * w.C * w.out_h * w.out_w == 0) return;
  LogicalDevice& dev = bind_owner(y, "max_pool2d");
  CUDA_CHECK(cuda::launch_max_pool2d(x, to_kernel(w), y, argmax, dev.stream));
}

void CudaBackend::max_pool2d_backward_kernel(const float* gy, const int64_t* argmax,
                                             const Window2d& w, float* gx) {
  if (w.N * w.C * w.H * w.W == 0) return;
  LogicalDevice& dev = bind_owner(gx, "max_pool2d_backward");
  CUDA_CHECK(
      cuda::launch_max_pool2d_backward(gy, argmax, to_kernel(w), gx, dev.err_flag, dev.stream));
  check_indices(dev, "max_pool2d_backward", "argmax", w.H * w.W);
}

void CudaBackend::avg_pool2d_kernel(const float* x, const Window2d& w, float* y) {
  if (w.N * w.C * w.out_h * w.out_w == 0) return;
  LogicalDevice& dev = bind_owner(y, "avg_pool2d");
  CUDA_CHECK(cuda::launch_avg_pool2d(x, to_kernel(w), y, dev.stream));
}

void CudaBackend::avg_pool2d_backward_kernel(const float* gy, const Window2d& w, float* gx) {
  if (w.N * w.C * w.H * w.W == 0) return;
  LogicalDevice& dev = bind_owner(gx, "avg_pool2d_backward");
  CUDA_CHECK(cuda::launch_avg_pool2d_backward(gy, to_kernel(w), gx, dev.stream));
}

void CudaBackend::sgd_step_kernel(const SgdArgs& a, float* param, const float* grad,
                                  float* momentum_buf, int64_t n) {
  if (n <= 0) return;
  LogicalDevice& dev = bind_owner(param, "sgd_step");
  const cuda::KSgd k{a.lr, a.momentum, a.dampening, a.weight_decay, a.nesterov, a.first_step};
  CUDA_CHECK(cuda::launch_sgd_step(k, param, grad, momentum_buf, n, dev.stream));
}

void CudaBackend::adam_step_kernel(const AdamArgs& a, float* param, const float* grad, float* m,
                                   float* v, int64_t n) {
  if (n <= 0) return;
  LogicalDevice& dev = bind_owner(param, "adam_step");
  // Bias corrections in double on the host: beta2^t for t ~ 1e4 needs the precision.
  const double t = static_cast<double>(a.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), t);
  const cuda::KAdam k{a.lr,
                      a.beta1,
                      a.beta2,
                      a.eps,
                      a.weight_decay,
                      a.decoupled,
                      static_cast<float>(a.lr / bc1),
                      static_cast<float>(1.0 / std::sqrt(bc2))};
  CUDA_CHECK(cuda::launch_adam_step(k, param, grad, m, v, n, dev.stream));
}

}  // namespace dplab
