// cpu_elementwise.cpp: fill, strided_copy, cast, unary, binary and reduce_into on the CPU.
// Strided reads (broadcasts, transposes) are handled by one walker: dimensions that are
// laid out back to back in every operand are merged first, so a contiguous tensor becomes
// one flat loop and [B, N] + [N] becomes B loops over N; then only the innermost loop runs
// per element, with its strides fixed at 1 or 0 in the common cases, which g++ -O3 turns
// into AVX2 code. Unary maths (exp, tanh, ...) uses Eigen arrays for vectorised exp/log;
// GELU's formulas are gelu_math.h's, shared with CUDA.
// Read next: cpu_reduce.cpp.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_half.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/backend/gelu_math.h"
#include "framework/error.h"

namespace dplab {
namespace {

// Up to two strided operands over one shape, after merging and dropping size-1 dims.
struct Walk {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t sa[kMaxDims] = {};
  int64_t sb[kMaxDims] = {};
};

Walk make_walk(const Strided& a, const Strided* b) {
  Walk w;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] == 1) continue;  // contributes nothing to any offset
    w.shape[w.ndim] = a.shape[d];
    w.sa[w.ndim] = a.strides[d];
    w.sb[w.ndim] = b ? b->strides[d] : 0;
    ++w.ndim;
  }
  // Merge dim i into dim i+1 when, for both operands, stepping i is stepping i+1 shape times.
  int out = 0;
  for (int d = 1; d < w.ndim; ++d) {
    bool merge = w.sa[out] == w.sa[d] * w.shape[d] && w.sb[out] == w.sb[d] * w.shape[d];
    if (merge) {
      w.shape[out] *= w.shape[d];
      w.sa[out] = w.sa[d];
      w.sb[out] = w.sb[d];
    } else {
      ++out;
      w.shape[out] = w.shape[d];
      w.sa[out] = w.sa[d];
      w.sb[out] = w.sb[d];
    }
  }
  if (w.ndim > 0) w.ndim = out + 1;
  if (w.ndim == 0) {  // a single element
    w.ndim = 1;
    w.shape[0] = 1;
    w.sa[0] = w.sb[0] = 0;
  }
  return w;
}

// Calls inner(offset_a, offset_b, out_offset, n) for runs of n elements along the innermost
// dim, covering output elements [e0, e1) (the output is contiguous).
template <typename Inner>
void walk_range(const Walk& w, int64_t e0, int64_t e1, Inner inner) {
  const int last = w.ndim - 1;
  const int64_t len = w.shape[last];
  // Set the odometer over the outer dims to row e0 / len.
  int64_t idx[kMaxDims] = {};
  int64_t oa = 0, ob = 0;
  for (int64_t d = last - 1, rest = e0 / len; d >= 0; --d) {
    idx[d] = rest % w.shape[d];
    rest /= w.shape[d];
    oa += idx[d] * w.sa[d];
    ob += idx[d] * w.sb[d];
  }
  for (int64_t e = e0, j = e0 % len; e < e1; j = 0) {
    const int64_t n = std::min(len - j, e1 - e);
    inner(oa + j * w.sa[last], ob + j * w.sb[last], e, n);
    e += n;
    // Advance the odometer over the outer dims.
    for (int d = last - 1; d >= 0; --d) {
      oa += w.sa[d];
      ob += w.sb[d];
      if (++idx[d] < w.shape[d]) break;
      oa -= w.sa[d] * w.shape[d];
      ob -= w.sb[d] * w.shape[d];
      idx[d] = 0;
    }
  }
}

// walk_range over the whole output, its elements split evenly between the threads.
template <typename Inner>
void walk_rows(const Walk& w, Inner inner) {
  int64_t total = 1;
  for (int d = 0; d < w.ndim; ++d) total *= w.shape[d];
  const int threads = threads_for(total);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int p = 0; p < threads; ++p)
    walk_range(w, total * p / threads, total * (p + 1) / threads, inner);
}

template <typename T>
void strided_copy_typed(const T* src, const Strided& layout, T* out) {
  Walk w = make_walk(layout, nullptr);
  const int64_t s = w.sa[w.ndim - 1];
  walk_rows(w, [&](int64_t oa, int64_t, int64_t o, int64_t len) {
    const T* p = src + oa;
    T* q = out + o;
    if (s == 1) {
      std::memcpy(q, p, static_cast<std::size_t>(len) * sizeof(T));
    } else {
      for (int64_t j = 0; j < len; ++j) q[j] = p[j * s];
    }
  });
}

// out[j] = f(a[j*SA], b[j*SB]) with the strides known at compile time in the common cases,
// so the loop vectorises.
template <typename F>
void binary_rows(const float* a, const float* b, float* out, const Walk& w, F f) {
  const int last = w.ndim - 1;
  const int64_t sa = w.sa[last], sb = w.sb[last];
  walk_rows(w, [&](int64_t oa, int64_t ob, int64_t o, int64_t len) {
    const float* pa = a + oa;
    const float* pb = b + ob;
    float* q = out + o;
    if (sa == 1 && sb == 1) {
      for (int64_t j = 0; j < len; ++j) q[j] = f(pa[j], pb[j]);
    } else if (sa == 1 && sb == 0) {
      const float vb = pb[0];
      for (int64_t j = 0; j < len; ++j) q[j] = f(pa[j], vb);
    } else if (sa == 0 && sb == 1) {
      const float va = pa[0];
      for (int64_t j = 0; j < len; ++j) q[j] = f(va, pb[j]);
    } else {
      for (int64_t j = 0; j < len; ++j) q[j] = f(pa[j * sa], pb[j * sb]);
    }
  });
}

// out = g * gelu_math::gelu_tanh_grad(x) over n contiguous elements, with Eigen's vectorised
// tanh as GeluTanh's forward has: libm's scalar tanhf (through expm1f) made this one
// elementwise op a quarter of a small GPT's training step on one thread. tanh(u) is used
// twice, so it is computed once per chunk into a stack buffer.
void gelu_tanh_grad_contiguous(const float* g, const float* x, float* out, int64_t n) {
  using gelu_math::kCubic, gelu_math::kSqrt2OverPi;
  constexpr int64_t kChunk = 256;
  alignas(64) float t_buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    Eigen::Map<const Eigen::ArrayXf> G(g + i, len), X(x + i, len);
    Eigen::Map<Eigen::ArrayXf> T(t_buf, len), Y(out + i, len);
    T = (kSqrt2OverPi * (X + kCubic * X.cube())).tanh();
    Y = G * (0.5f * (1.0f + T) +
             0.5f * X * (1.0f - T.square()) * (kSqrt2OverPi * (1.0f + 3.0f * kCubic * X.square())));
  }
}

template <typename T>
void reduce_into_typed(ReduceKind op, T* dst, const T* src, int64_t n) {
  switch (op) {
    case ReduceKind::Sum:
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      return;
    case ReduceKind::Max:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
      return;
    case ReduceKind::Min:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
      return;
    case ReduceKind::ArgMax: break;
  }
  DPLAB_FAIL("reduce_into: expected Sum, Max or Min, got ArgMax (an index has no reduction)");
}

}  // namespace

void CpuBackend::fill(DType t, void* out, int64_t n, double value) {
  if (is_low_precision(t)) return cpu_fill_half(t, out, n, value);
  if (t == DType::Float32) {
    std::fill_n(static_cast<float*>(out), n, static_cast<float>(value));
  } else {
    std::fill_n(static_cast<int64_t*>(out), n, static_cast<int64_t>(value));
  }
}

void CpuBackend::strided_copy(DType t, const void* src, const Strided& layout, void* out) {
  if (layout.numel() == 0) return;
  if (is_low_precision(t))
    return strided_copy_typed(static_cast<const uint16_t*>(src), layout,
                              static_cast<uint16_t*>(out));
  if (t == DType::Float32) {
    strided_copy_typed(static_cast<const float*>(src), layout, static_cast<float*>(out));
  } else {
    strided_copy_typed(static_cast<const int64_t*>(src), layout, static_cast<int64_t*>(out));
  }
}

void CpuBackend::cast(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (is_low_precision(from) || is_low_precision(to)) return cpu_cast_half(from, src, to, dst, n);
  if (from == to) {
    if (n > 0 && src != dst) std::memmove(dst, src, static_cast<std::size_t>(n) * element_size(to));
  } else if (from == DType::Float32) {  // float -> int64 truncates toward zero, as .long() does
    const float* s = static_cast<const float*>(src);
    int64_t* d = static_cast<int64_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int64_t>(s[i]);
  } else {
    const int64_t* s = static_cast<const int64_t*>(src);
    float* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
  }
}

// y[0, n) = op(x[0, n)); false for an op this file does not know.
static bool unary_chunk(UnaryOp op, const float* x, float* y, int64_t n, float s) {
  Eigen::Map<const Eigen::ArrayXf> X(x, n);
  Eigen::Map<Eigen::ArrayXf> Y(y, n);
  switch (op) {
    case UnaryOp::Neg: Y = -X; return true;
    case UnaryOp::Exp: Y = X.exp(); return true;
    case UnaryOp::Log: Y = X.log(); return true;
    case UnaryOp::Sqrt: Y = X.sqrt(); return true;
    case UnaryOp::Relu: Y = X.max(0.0f); return true;
    // 1 / (1 + e^-x), written by Eigen so it neither overflows nor loses precision
    case UnaryOp::Sigmoid: Y = X.logistic(); return true;
    case UnaryOp::Tanh: Y = X.tanh(); return true;
    case UnaryOp::Abs: Y = X.abs(); return true;
    case UnaryOp::PowScalar:
      if (s == 2.0f) {
        Y = X.square();
      } else if (s == 1.0f) {
        Y = X;
      } else {  // std::pow keeps integer powers of negative bases real: (-2)^3 = -8
        for (int64_t i = 0; i < n; ++i) y[i] = std::pow(x[i], s);
      }
      return true;
    case UnaryOp::AddScalar: Y = X + s; return true;
    case UnaryOp::MulScalar: Y = X * s; return true;
    case UnaryOp::RsubScalar: Y = s - X; return true;
    case UnaryOp::RdivScalar: Y = s / X; return true;
    case UnaryOp::GtScalar:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > s ? 1.0f : 0.0f;
      return true;
    case UnaryOp::Gelu:
      for (int64_t i = 0; i < n; ++i) y[i] = gelu_math::gelu(x[i]);
      return true;
    case UnaryOp::GeluTanh:  // gelu_math::gelu_tanh, with Eigen's vectorised tanh
      Y = 0.5f * X * (1.0f + (gelu_math::kSqrt2OverPi * (X + gelu_math::kCubic * X.cube())).tanh());
      return true;
  }
  return false;
}

void CpuBackend::unary(UnaryOp op, const float* x, float* y, int64_t n, float s) {
  if (n == 0) return;
  const int threads = threads_for(n);
  bool known = true;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(&& : known)
  for (int p = 0; p < threads; ++p) {
    const int64_t i0 = n * p / threads, i1 = n * (p + 1) / threads;
    known = unary_chunk(op, x + i0, y + i0, i1 - i0, s) && known;
  }
  DPLAB_CHECK(known, "unary: unknown UnaryOp {}", static_cast<int>(op));
}

void CpuBackend::binary_kernel(BinaryOp op, const float* a, const Strided& al, const float* b,
                               const Strided& bl, float* out) {
  if (al.numel() == 0) return;
  Walk w = make_walk(al, &bl);
  switch (op) {
    case BinaryOp::Add: binary_rows(a, b, out, w, [](float x, float y) { return x + y; }); return;
    case BinaryOp::Sub: binary_rows(a, b, out, w, [](float x, float y) { return x - y; }); return;
    case BinaryOp::Mul: binary_rows(a, b, out, w, [](float x, float y) { return x * y; }); return;
    case BinaryOp::Div: binary_rows(a, b, out, w, [](float x, float y) { return x / y; }); return;
    case BinaryOp::Pow:
      binary_rows(a, b, out, w, [](float x, float y) { return std::pow(x, y); });
      return;
    // NaN propagates, as torch.maximum / minimum do
    case BinaryOp::Max:
      binary_rows(a, b, out, w, [](float x, float y) { return (x != x || x >= y) ? x : y; });
      return;
    case BinaryOp::Min:
      binary_rows(a, b, out, w, [](float x, float y) { return (x != x || x <= y) ? x : y; });
      return;
    case BinaryOp::Eq:
      binary_rows(a, b, out, w, [](float x, float y) { return x == y ? 1.0f : 0.0f; });
      return;
    case BinaryOp::ReluGrad:
      binary_rows(a, b, out, w, [](float g, float x) { return x > 0.0f ? g : 0.0f; });
      return;
    case BinaryOp::SigmoidGrad:
      binary_rows(a, b, out, w, [](float g, float y) { return g * y * (1.0f - y); });
      return;
    case BinaryOp::TanhGrad:
      binary_rows(a, b, out, w, [](float g, float y) { return g * (1.0f - y * y); });
      return;
    case BinaryOp::GeluGrad:
      binary_rows(a, b, out, w, [](float g, float x) { return g * gelu_math::gelu_grad(x); });
      return;
    case BinaryOp::GeluTanhGrad: {
      const int last = w.ndim - 1;
      if (w.sa[last] != 1 || w.sb[last] != 1) {
        binary_rows(a, b, out, w,
                    [](float g, float x) { return g * gelu_math::gelu_tanh_grad(x); });
        return;
      }
      walk_rows(w, [&](int64_t oa, int64_t ob, int64_t o, int64_t len) {
        gelu_tanh_grad_contiguous(a + oa, b + ob, out + o, len);
      });
      return;
    }
  }
  DPLAB_FAIL("binary: unknown BinaryOp {}", static_cast<int>(op));
}

void CpuBackend::reduce_into(ReduceKind op, DType t, void* dst, const void* src, int64_t n) {
  if (is_low_precision(t)) return cpu_reduce_into_half(op, t, dst, src, n);
  if (t == DType::Float32) {
    reduce_into_typed(op, static_cast<float*>(dst), static_cast<const float*>(src), n);
  } else {
    reduce_into_typed(op, static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n);
  }
}

}  // namespace dplab
