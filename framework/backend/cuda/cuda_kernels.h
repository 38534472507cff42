// cuda_kernels.h: the launchers of every CUDA kernel, as plain C++ that nvcc and g++ both
// read (no fmt, no Eigen, no dplab headers: fmt does not compile under nvcc in C++20).
// Each launcher queues its kernel on `s` and returns cudaGetLastError(); the caller
// (cuda_backend*.cpp) turns that into a CudaError. Structs and enums mirror backend.h;
// cuda_backend_kernels.cpp static_asserts that the enum values agree.
// Kernels that validate indices add to err[0] and store the first bad value in err[1].
// Read next: cuda_elementwise.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dplab::cuda {

constexpr int kKernelMaxDims = 8;  // = kMaxDims of backend.h

struct KStrided {  // = Strided: element i of `shape` is at sum(i_k * strides[k])
  int ndim = 0;
  int64_t shape[kKernelMaxDims] = {};
  int64_t strides[kKernelMaxDims] = {};
};
struct KWindow {  // = Window2d
  int64_t N, C, H, W, kh, kw, stride, pad, out_h, out_w;
};
enum class KUnary : int {
  Neg,
  Exp,
  Log,
  Sqrt,
  Relu,
  Sigmoid,
  Tanh,
  Abs,
  PowScalar,
  AddScalar,
  MulScalar,
  RsubScalar,
  RdivScalar,
  GtScalar,
  Gelu,
  GeluTanh
};
enum class KBinary : int {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  Eq,
  ReluGrad,
  SigmoidGrad,
  TanhGrad,
  GeluGrad,
  GeluTanhGrad
};
enum class KReduce : int { Sum, Max, Min, ArgMax };

// ---- cuda_elementwise.cu ----
cudaError_t launch_fill_f32(float* out, int64_t n, float v, cudaStream_t s);
cudaError_t launch_fill_i64(int64_t* out, int64_t n, int64_t v, cudaStream_t s);
cudaError_t launch_strided_copy(int elem_bytes, const void* src, const KStrided& l, void* out,
                                cudaStream_t s);
cudaError_t launch_cast_f32_i64(const float* src, int64_t* dst, int64_t n, cudaStream_t s);
cudaError_t launch_cast_i64_f32(const int64_t* src, float* dst, int64_t n, cudaStream_t s);
cudaError_t launch_unary(KUnary op, const float* x, float* y, int64_t n, float scalar,
                         cudaStream_t s);
cudaError_t launch_binary(KBinary op, const float* a, const KStrided& al, const float* b,
                          const KStrided& bl, float* out, cudaStream_t s);
cudaError_t launch_reduce_into_f32(KReduce op, float* dst, const float* src, int64_t n,
                                   cudaStream_t s);
cudaError_t launch_reduce_into_i64(KReduce op, int64_t* dst, const int64_t* src, int64_t n,
                                   cudaStream_t s);

// ---- cuda_reduce.cu: x as [outer, r, inner] -> out [outer, inner] (int64 for ArgMax) ----
// Bytes of scratch launch_reduce needs for its two-pass shapes (0: none; then scratch may
// be null). The caller allocates it on the stream's device and frees it after the launch.
std::size_t reduce_scratch_bytes(KReduce op, int64_t outer, int64_t r, int64_t inner);
cudaError_t launch_reduce(KReduce op, const float* x, void* out, int64_t outer, int64_t r,
                          int64_t inner, void* scratch, cudaStream_t s);

// ---- cuda_nn.cu: softmax family and indexing along dim 0 ----
cudaError_t launch_softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log,
                           cudaStream_t s);
cudaError_t launch_softmax_backward(const float* gy, const float* y, float* gx, int64_t rows,
                                    int64_t cols, bool log, cudaStream_t s);
cudaError_t launch_nll_loss(const float* logp, const int64_t* target, float* out, int64_t rows,
                            int64_t cols, unsigned long long* err, cudaStream_t s);
cudaError_t launch_nll_loss_backward(const float* gout, const int64_t* target, float* glogp,
                                     int64_t rows, int64_t cols, unsigned long long* err,
                                     cudaStream_t s);
cudaError_t launch_index_rows(int elem_bytes, const void* src, int64_t src_rows, const int64_t* idx,
                              int64_t n_idx, int64_t row_elems, void* out, unsigned long long* err,
                              cudaStream_t s);
cudaError_t launch_index_add_rows(const float* g, const int64_t* idx, int64_t n_idx,
                                  int64_t row_elems, float* out, unsigned long long* err,
                                  cudaStream_t s);
cudaError_t launch_gather_rows(const float* src, int64_t src_rows, const int64_t* idx, int64_t rows,
                               int64_t cols, float* out, unsigned long long* err, cudaStream_t s);
cudaError_t launch_scatter_add_rows(const float* g, const int64_t* idx, int64_t rows, int64_t cols,
                                    float* out, unsigned long long* err, cudaStream_t s);

// ---- cuda_transformer.cu: causal softmax and layer norm (backend.h has their maths) ----
cudaError_t launch_causal_softmax(const float* x, float* y, int64_t batch, int64_t q, int64_t k,
                                  cudaStream_t s);
cudaError_t launch_layer_norm(const float* x, const float* w, const float* b, float* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t s);
cudaError_t launch_layer_norm_backward(const float* gy, const float* x, const float* w,
                                       const float* mean, const float* rstd, float* gx, float* gw,
                                       float* gb, int64_t rows, int64_t cols, cudaStream_t s);

// ---- cuda_conv_pool.cu ----
cudaError_t launch_im2col(const float* x, const KWindow& w, float* cols, cudaStream_t s);
cudaError_t launch_col2im(const float* cols, const KWindow& w, float* gx, cudaStream_t s);
cudaError_t launch_max_pool2d(const float* x, const KWindow& w, float* y, int64_t* argmax,
                              cudaStream_t s);
cudaError_t launch_max_pool2d_backward(const float* gy, const int64_t* argmax, const KWindow& w,
                                       float* gx, unsigned long long* err, cudaStream_t s);
cudaError_t launch_avg_pool2d(const float* x, const KWindow& w, float* y, cudaStream_t s);
cudaError_t launch_avg_pool2d_backward(const float* gy, const KWindow& w, float* gx,
                                       cudaStream_t s);

// ---- cuda_optim.cu: one thread per parameter, torch.optim formulas ----
struct KSgd {
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};
struct KAdam {
  float lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  float step_size, inv_sqrt_bc2;  // lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t), made in double
};
cudaError_t launch_sgd_step(const KSgd& a, float* param, const float* grad, float* buf, int64_t n,
                            cudaStream_t s);
cudaError_t launch_adam_step(const KAdam& a, float* param, const float* grad, float* m, float* v,
                             int64_t n, cudaStream_t s);

}  // namespace dplab::cuda
