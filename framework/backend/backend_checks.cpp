// backend_checks.cpp: see backend_checks.h.
#include "framework/backend/backend_checks.h"

#include "framework/error.h"

namespace dplab {

void check_window(const char* what, const Window2d& w) {
  DPLAB_CHECK(w.N >= 0 && w.C >= 0 && w.H >= 0 && w.W >= 0 && w.kh > 0 && w.kw > 0 &&
                  w.stride > 0 && w.pad >= 0,
              "{}: bad window N={} C={} H={} W={} kernel={}x{} stride={} pad={}", what, w.N, w.C,
              w.H, w.W, w.kh, w.kw, w.stride, w.pad);
  const int64_t oh = (w.H + 2 * w.pad - w.kh) / w.stride + 1;
  const int64_t ow = (w.W + 2 * w.pad - w.kw) / w.stride + 1;
  DPLAB_CHECK(
      w.out_h == oh && w.out_w == ow,
      "{}: expected output {}x{} for input {}x{}, kernel {}x{}, stride {}, pad {}; got {}x{}", what,
      oh, ow, w.H, w.W, w.kh, w.kw, w.stride, w.pad, w.out_h, w.out_w);
}

void check_same_shape(const char* what, const Strided& a, const Strided& b) {
  DPLAB_CHECK(a.ndim == b.ndim, "{}: layouts must share the output shape, got {} and {} dims", what,
              a.ndim, b.ndim);
  for (int d = 0; d < a.ndim; ++d)
    DPLAB_CHECK(a.shape[d] == b.shape[d], "{}: layouts differ in dim {}: {} vs {}", what, d,
                a.shape[d], b.shape[d]);
}

void check_reduce(ReduceKind op, int64_t outer, int64_t r, int64_t inner) {
  DPLAB_CHECK(outer >= 0 && r >= 0 && inner >= 0,
              "reduce: expected non-negative [outer, r, inner], got [{}, {}, {}]", outer, r, inner);
  if (outer == 0 || inner == 0) return;  // nothing to compute, whatever r is
  DPLAB_CHECK(r > 0 || op == ReduceKind::Sum, "reduce: {} over an empty dim (r = 0) has no answer",
              op == ReduceKind::ArgMax ? "argmax" : "max/min");
}

void check_sgd_args(const SgdArgs& a, const float* momentum_buf) {
  DPLAB_CHECK(a.momentum == 0.0f || momentum_buf != nullptr,
              "sgd_step: momentum is {} but no momentum buffer was given", a.momentum);
  DPLAB_CHECK(!a.nesterov || (a.momentum != 0.0f && a.dampening == 0.0f),
              "sgd_step: nesterov needs momentum > 0 and dampening 0, got momentum {} dampening {}",
              a.momentum, a.dampening);
}

void check_adam_args(const AdamArgs& a) {
  DPLAB_CHECK(a.step >= 1, "adam_step: expected step >= 1 (1-based), got {}", a.step);
}

void check_causal(int64_t batch, int64_t q, int64_t k) {
  DPLAB_CHECK(batch >= 0 && q >= 0 && q <= k,
              "causal_softmax: expected [batch, q, k] with 0 <= q <= k (every query sees a key), "
              "got [{}, {}, {}]",
              batch, q, k);
}

// ---- the public Backend functions: the check, then the backend's kernel ----

void Backend::binary(BinaryOp op, const float* a, const Strided& a_layout, const float* b,
                     const Strided& b_layout, float* out) {
  check_same_shape("binary", a_layout, b_layout);
  binary_kernel(op, a, a_layout, b, b_layout, out);
}

void Backend::reduce(ReduceKind op, const float* x, void* out, int64_t outer, int64_t r,
                     int64_t inner) {
  check_reduce(op, outer, r, inner);
  reduce_kernel(op, x, out, outer, r, inner);
}

void Backend::causal_softmax(const float* x, float* y, int64_t batch, int64_t q, int64_t k) {
  check_causal(batch, q, k);
  causal_softmax_kernel(x, y, batch, q, k);
}

void Backend::im2col(const float* x, const Window2d& w, float* cols) {
  check_window("im2col", w);
  im2col_kernel(x, w, cols);
}

void Backend::col2im(const float* cols, const Window2d& w, float* gx) {
  check_window("col2im", w);
  col2im_kernel(cols, w, gx);
}

void Backend::max_pool2d(const float* x, const Window2d& w, float* y, int64_t* argmax) {
  check_window("max_pool2d", w);
  max_pool2d_kernel(x, w, y, argmax);
}

void Backend::max_pool2d_backward(const float* gy, const int64_t* argmax, const Window2d& w,
                                  float* gx) {
  check_window("max_pool2d_backward", w);
  max_pool2d_backward_kernel(gy, argmax, w, gx);
}

void Backend::avg_pool2d(const float* x, const Window2d& w, float* y) {
  check_window("avg_pool2d", w);
  avg_pool2d_kernel(x, w, y);
}

void Backend::avg_pool2d_backward(const float* gy, const Window2d& w, float* gx) {
  check_window("avg_pool2d_backward", w);
  avg_pool2d_backward_kernel(gy, w, gx);
}

void Backend::sgd_step(const SgdArgs& a, float* param, const float* grad, float* momentum_buf,
                       int64_t n) {
  check_sgd_args(a, momentum_buf);
  sgd_step_kernel(a, param, grad, momentum_buf, n);
}

void Backend::adam_step(const AdamArgs& a, float* param, const float* grad, float* m, float* v,
                        int64_t n) {
  check_adam_args(a);
  adam_step_kernel(a, param, grad, m, v, n);
}

}  // namespace dplab
