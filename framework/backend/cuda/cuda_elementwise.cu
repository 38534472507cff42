// cuda_elementwise.cu: fill, strided_copy, cast, unary, binary and reduce_into on the GPU.
// All are memory-bound: one read (two for binary) and one write per element, so the goal
// is coalesced access — consecutive threads touch consecutive output elements — and no
// more index arithmetic than needed. Contiguous operands take a flat path; strided ones
// (broadcast: stride 0, transpose: permuted strides) decompose the output index once per
// element with the shape passed by value in a KStrided (136 bytes of kernel parameters).
// GELU's formulas are ../gelu_math.h's, the CPU's too. Read next: cuda_reduce.cu.
#include "framework/backend/cuda/cuda_kernels.h"
#include "framework/backend/cuda/cuda_launch.cuh"
#include "framework/backend/gelu_math.h"

namespace dplab::cuda {
namespace {

// Offset in elements of output element i (row-major over l.shape) read through l.strides.
__device__ inline int64_t strided_offset(const KStrided& l, int64_t i) {
  int64_t off = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t q = i / l.shape[d];
    off += (i - q * l.shape[d]) * l.strides[d];
    i = q;
  }
  return off;
}

bool is_contiguous(const KStrided& l) {
  int64_t expect = 1;
  for (int d = l.ndim - 1; d >= 0; --d) {
    if (l.shape[d] != 1 && l.strides[d] != expect) return false;
    expect *= l.shape[d];
  }
  return true;
}

int64_t numel(const KStrided& l) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.shape[d];
  return n;
}

template <typename T>
__global__ void fill_kernel(T* out, int64_t n, T v) {
  DPLAB_GRID_LOOP(i, n) out[i] = v;
}

template <typename T>
__global__ void strided_copy_kernel(const T* src, KStrided l, T* out, int64_t n) {
  DPLAB_GRID_LOOP(i, n) out[i] = src[strided_offset(l, i)];
}

template <typename From, typename To>
__global__ void cast_kernel(const From* src, To* dst, int64_t n) {
  DPLAB_GRID_LOOP(i, n) dst[i] = static_cast<To>(src[i]);
}

__device__ inline float unary_op(KUnary op, float x, float s) {
  switch (op) {
    case KUnary::Neg: return -x;
    case KUnary::Exp: return expf(x);
    case KUnary::Log: return logf(x);
    case KUnary::Sqrt: return sqrtf(x);
    case KUnary::Relu: return x > 0.0f ? x : 0.0f;
    // 1 / (1 + e^-x) overflows to 0 for very negative x, which is the right limit
    case KUnary::Sigmoid: return 1.0f / (1.0f + expf(-x));
    case KUnary::Tanh: return tanhf(x);
    case KUnary::Abs: return fabsf(x);
    case KUnary::PowScalar: return s == 2.0f ? x * x : powf(x, s);
    case KUnary::AddScalar: return x + s;
    case KUnary::MulScalar: return x * s;
    case KUnary::RsubScalar: return s - x;
    case KUnary::RdivScalar: return s / x;
    case KUnary::GtScalar: return x > s ? 1.0f : 0.0f;
    case KUnary::Gelu: return gelu_math::gelu(x);
    case KUnary::GeluTanh: return gelu_math::gelu_tanh(x);
  }
  return 0.0f;
}

// The switch is uniform across the grid (every thread takes the same branch), so it costs
// a few instructions per element, not divergence; one kernel serves all 16 ops.
__global__ void unary_kernel(KUnary op, const float* x, float* y, int64_t n, float s) {
  DPLAB_GRID_LOOP(i, n) y[i] = unary_op(op, x[i], s);
}

__device__ inline float binary_op(KBinary op, float a, float b) {
  switch (op) {
    case KBinary::Add: return a + b;
    case KBinary::Sub: return a - b;
    case KBinary::Mul: return a * b;
    case KBinary::Div: return a / b;
    case KBinary::Pow: return powf(a, b);
    case KBinary::Max: return (a != a || a >= b) ? a : b;  // NaN propagates, as torch.maximum
    case KBinary::Min: return (a != a || a <= b) ? a : b;
    case KBinary::Eq: return a == b ? 1.0f : 0.0f;
    case KBinary::ReluGrad: return b > 0.0f ? a : 0.0f;          // a = grad, b = relu input
    case KBinary::SigmoidGrad: return a * b * (1.0f - b);        // b = sigmoid output
    case KBinary::TanhGrad: return a * (1.0f - b * b);           // b = tanh output
    case KBinary::GeluGrad: return a * gelu_math::gelu_grad(b);  // b = gelu input
    case KBinary::GeluTanhGrad: return a * gelu_math::gelu_tanh_grad(b);  // b = gelu input
  }
  return 0.0f;
}

__global__ void binary_flat_kernel(KBinary op, const float* a, const float* b, float* out,
                                   int64_t n) {
  DPLAB_GRID_LOOP(i, n) out[i] = binary_op(op, a[i], b[i]);
}

__global__ void binary_strided_kernel(KBinary op, const float* a, KStrided al, const float* b,
                                      KStrided bl, float* out, int64_t n) {
  DPLAB_GRID_LOOP(i, n) out[i] = binary_op(op, a[strided_offset(al, i)], b[strided_offset(bl, i)]);
}

template <typename T>
__global__ void reduce_into_kernel(KReduce op, T* dst, const T* src, int64_t n) {
  DPLAB_GRID_LOOP(i, n) {
    const T d = dst[i], v = src[i];
    dst[i] = op == KReduce::Sum ? d + v : op == KReduce::Max ? (v > d ? v : d) : (v < d ? v : d);
  }
}

}  // namespace

cudaError_t launch_fill_f32(float* out, int64_t n, float v, cudaStream_t s) {
  if (n > 0) fill_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(out, n, v);
  return cudaGetLastError();
}

cudaError_t launch_fill_i64(int64_t* out, int64_t n, int64_t v, cudaStream_t s) {
  if (n > 0) fill_kernel<int64_t><<<blocks_for(n), kThreads, 0, s>>>(out, n, v);
  return cudaGetLastError();
}

cudaError_t launch_strided_copy(int elem_bytes, const void* src, const KStrided& l, void* out,
                                cudaStream_t s) {
  const int64_t n = numel(l);
  if (n == 0) return cudaSuccess;
  if (is_contiguous(l)) {
    return cudaMemcpyAsync(out, src, static_cast<size_t>(n) * elem_bytes, cudaMemcpyDeviceToDevice,
                           s);
  }
  // Elements are moved as opaque words of their size: float32 (4), int64 (8), float16 (2).
  if (elem_bytes == 4) {
    strided_copy_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(src), l,
                                                                  static_cast<float*>(out), n);
  } else if (elem_bytes == 8) {
    strided_copy_kernel<int64_t><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const int64_t*>(src), l, static_cast<int64_t*>(out), n);
  } else if (elem_bytes == 2) {
    strided_copy_kernel<uint16_t><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(src), l, static_cast<uint16_t*>(out), n);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// float -> int64 truncates toward zero, as .long() does
cudaError_t launch_cast_f32_i64(const float* src, int64_t* dst, int64_t n, cudaStream_t s) {
  if (n > 0) cast_kernel<float, int64_t><<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_cast_i64_f32(const int64_t* src, float* dst, int64_t n, cudaStream_t s) {
  if (n > 0) cast_kernel<int64_t, float><<<blocks_for(n), kThreads, 0, s>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_unary(KUnary op, const float* x, float* y, int64_t n, float scalar,
                         cudaStream_t s) {
  if (n > 0) unary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, x, y, n, scalar);
  return cudaGetLastError();
}

cudaError_t launch_binary(KBinary op, const float* a, const KStrided& al, const float* b,
                          const KStrided& bl, float* out, cudaStream_t s) {
  const int64_t n = numel(al);
  if (n == 0) return cudaSuccess;
  if (is_contiguous(al) && is_contiguous(bl)) {
    binary_flat_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, a, b, out, n);
  } else {
    binary_strided_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, a, al, b, bl, out, n);
  }
  return cudaGetLastError();
}

cudaError_t launch_reduce_into_f32(KReduce op, float* dst, const float* src, int64_t n,
                                   cudaStream_t s) {
  if (n > 0) reduce_into_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(op, dst, src, n);
  return cudaGetLastError();
}

cudaError_t launch_reduce_into_i64(KReduce op, int64_t* dst, const int64_t* src, int64_t n,
                                   cudaStream_t s) {
  if (n > 0) reduce_into_kernel<int64_t><<<blocks_for(n), kThreads, 0, s>>>(op, dst, src, n);
  return cudaGetLastError();
}

}  // namespace dplab::cuda
