// backend.h: the flat list of kernels a device must provide (the needle way).
// Ops in framework/ops/ resolve shapes, broadcasting and autograd once; a backend only
// computes, on contiguous buffers (a Strided describes the one strided read we allow).
// CPU implements this in backend/cpu/ on Eigen; CUDA in backend/cuda/ on kernels + cuBLAS.
// Kernels whose arguments carry a contract of their own (a window, two layouts, optimizer
// flags) are public non-virtual functions here that check it (backend_checks.h) and then
// call the protected *_kernel each backend implements.
// Every kernel runs on the device the pointers belong to; CUDA kernels are asynchronous
// on that device's stream, and copy_to_host synchronises.
// Read next: backend/cpu/cpu_backend.h, ops/ops.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "framework/tensor/device.h"
#include "framework/tensor/dtype.h"

namespace dplab {

inline constexpr int kMaxDims = 8;

// A read pattern: element (i0, i1, ...) of `shape` is at sum(i_k * strides[k]) (in elements).
// A stride of 0 repeats (broadcast); permuted strides transpose.
struct Strided {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

enum class UnaryOp {
  Neg,
  Exp,
  Log,
  Sqrt,
  Relu,
  Sigmoid,
  Tanh,
  Abs,
  PowScalar,   // x^s
  AddScalar,   // x + s
  MulScalar,   // x * s
  RsubScalar,  // s - x
  RdivScalar,  // s / x
  GtScalar,    // 1 if x > s else 0
  Gelu,        // x * Phi(x), Phi the standard normal CDF: 0.5 x (1 + erf(x / sqrt 2))
  GeluTanh,    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's approximation
};

enum class BinaryOp {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  Eq,            // 1 if a == b else 0
  ReluGrad,      // a * (b > 0)        a = grad, b = relu input
  SigmoidGrad,   // a * b * (1 - b)    b = sigmoid output
  TanhGrad,      // a * (1 - b*b)      b = tanh output
  GeluGrad,      // a * gelu'(b)       b = gelu input (the formulas: backend/gelu_math.h)
  GeluTanhGrad,  // a * gelu_tanh'(b)  b = gelu input
};

// What a kernel computes over elements: along a dim (reduce) or elementwise into a buffer
// (reduce_into, under the collectives). Not parallel::ReduceOp, the collectives' reduction,
// which adds Avg (a Sum, then a scale) and has no ArgMax.
enum class ReduceKind { Sum, Max, Min, ArgMax };

// C = alpha * op(A) @ op(B) + beta * C, row-major, for `batch` matrices.
// op(A) is [M, K] (A stored [K, M] when trans_a), op(B) is [K, N] (B stored [N, K] when trans_b).
// A batch stride of 0 reuses the same matrix for every batch entry.
struct GemmArgs {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
};

// x: [N, C, H, W] -> y: [N, C, out_h, out_w]; columns for conv are [C*kh*kw, N*out_h*out_w].
struct Window2d {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t kh = 0, kw = 0, stride = 1, pad = 0;
  int64_t out_h = 0, out_w = 0;
};

struct SgdArgs {
  float lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = true;  // momentum buffer starts as a copy of the gradient
};
struct AdamArgs {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  bool decoupled = false;  // AdamW
  int64_t step = 1;        // 1-based, for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- memory and copies ----
  virtual void* allocate(Device d, std::size_t nbytes) = 0;
  virtual void deallocate(Device d, void* p, std::size_t nbytes) = 0;
  virtual void copy_from_host(Device d, void* dst, const void* src, std::size_t nbytes) = 0;
  virtual void copy_to_host(Device d, void* dst, const void* src, std::size_t nbytes) = 0;
  // dst on device `dst_dev`, src on `src_dev`, both of this backend's kind.
  virtual void copy_device(Device dst_dev, void* dst, Device src_dev, const void* src,
                           std::size_t nbytes) = 0;
  virtual void synchronize(Device d) = 0;

  // ---- elementwise ----
  virtual void fill(DType t, void* out, int64_t n, double value) = 0;
  // out (contiguous, src.shape order) <- src read through the pattern.
  virtual void strided_copy(DType t, const void* src, const Strided& src_layout, void* out) = 0;
  virtual void cast(DType from, const void* src, DType to, void* dst, int64_t n) = 0;
  virtual void unary(UnaryOp op, const float* x, float* y, int64_t n, float scalar) = 0;
  // out (contiguous, shape of a_layout) <- a op b; layouts share the output shape, with
  // stride 0 where an input broadcasts. out may alias a or b when their layout is contiguous.
  void binary(BinaryOp op, const float* a, const Strided& a_layout, const float* b,
              const Strided& b_layout, float* out);
  // dst[i] = dst[i] op src[i] (Sum, Max or Min), float32 or int64: the collectives' reduction.
  virtual void reduce_into(ReduceKind op, DType t, void* dst, const void* src, int64_t n) = 0;

  // ---- reductions: x viewed as [outer, r, inner], reduced over r -> [outer, inner] ----
  // out is float32, or int64 for ArgMax (first maximum wins).
  void reduce(ReduceKind op, const float* x, void* out, int64_t outer, int64_t r, int64_t inner);

  // ---- linear algebra ----
  virtual void gemm(const GemmArgs& g, const float* a, const float* b, float* c) = 0;
  // The same product with A, B and C all of the 16-bit dtype t (Float16 or BFloat16):
  // products summed in float32, C rounded to t once, as tensor cores do. The CPU converts
  // the operands to float32 and runs its float GEMM (cpu_gemm_lowp.cpp); CUDA calls
  // cublasGemmEx with CUBLAS_COMPUTE_32F.
  virtual void gemm_lowp(const GemmArgs& g, DType t, const void* a, const void* b, void* c) = 0;

  // ---- softmax family: rows of length cols ----
  virtual void softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log) = 0;
  // gx = softmax': y*(gy - sum(gy*y)); log_softmax': gy - exp(y)*sum(gy)
  virtual void softmax_backward(const float* gy, const float* y, float* gx, int64_t rows,
                                int64_t cols, bool log) = 0;
  // out[i] = -logp[i, target[i]]; targets must lie in [0, cols) (throws otherwise).
  virtual void nll_loss(const float* logp, const int64_t* target, float* out, int64_t rows,
                        int64_t cols) = 0;
  // glogp[i, j] = -gout[i] if j == target[i] else 0
  virtual void nll_loss_backward(const float* gout, const int64_t* target, float* glogp,
                                 int64_t rows, int64_t cols) = 0;

  // ---- the transformer's kernels: causal softmax, layer norm ----
  // x viewed as [batch, q, k] (attention scores: q queries, k keys). Row i of each [q, k]
  // matrix is a softmax over its columns j <= i + (k - q), with the row max subtracted, and
  // its later columns are written 0 exactly: the last query sees every key, and for q = k
  // row i sees 0..i. Needs 0 <= q <= k (every row sees at least one key). The backward is
  // softmax_backward's: a masked y of 0 gives a gradient of 0 there.
  void causal_softmax(const float* x, float* y, int64_t batch, int64_t q, int64_t k);
  // Layer norm over each row of x [rows, cols] (cols > 0): mean[r], rstd[r] = 1 / sqrt(var +
  // eps) with the biased variance, and y = (x - mean) * rstd * w + b; w and b are [cols], and
  // either may be null (1 and 0).
  virtual void layer_norm(const float* x, const float* w, const float* b, float* y, float* mean,
                          float* rstd, int64_t rows, int64_t cols, float eps) = 0;
  // Its gradients from gy and the forward's mean and rstd, with xhat = (x - mean) * rstd:
  //   gx = rstd * (gy*w - mean_j(gy*w) - xhat * mean_j(gy*w * xhat))   (per row)
  //   gw = sum_rows(gy * xhat),  gb = sum_rows(gy)
  // gx [rows, cols], gw and gb [cols] are overwritten, each unless null (not wanted); w may
  // be null (1).
  virtual void layer_norm_backward(const float* gy, const float* x, const float* w,
                                   const float* mean, const float* rstd, float* gx, float* gw,
                                   float* gb, int64_t rows, int64_t cols) = 0;

  // ---- indexing along dim 0 ----
  // out[i, :] = src[idx[i], :]; idx must lie in [0, src_rows) (throws otherwise).
  virtual void index_rows(DType t, const void* src, int64_t src_rows, const int64_t* idx,
                          int64_t n_idx, int64_t row_elems, void* out) = 0;
  // out[idx[i], :] += g[i, :]
  virtual void index_add_rows(const float* g, const int64_t* idx, int64_t n_idx, int64_t row_elems,
                              float* out) = 0;
  // out[i, j] = src[idx[i, j], j]; out and idx are [rows, cols], src is [src_rows, cols].
  virtual void gather_rows(const float* src, int64_t src_rows, const int64_t* idx, int64_t rows,
                           int64_t cols, float* out) = 0;
  // out[idx[i, j], j] += g[i, j]
  virtual void scatter_add_rows(const float* g, const int64_t* idx, int64_t rows, int64_t cols,
                                float* out) = 0;

  // ---- convolution helpers and pooling ----
  // x: [N, C, H, W] -> cols: [C*kh*kw, N*out_h*out_w], every image's columns side by side
  // (row (c*kh + i)*kw + j, column n*out_h*out_w + oh*out_w + ow), so that a convolution
  // over the whole batch is one GEMM. Padding reads as 0.
  void im2col(const float* x, const Window2d& w, float* cols);
  // gx <- every column entry added back to its image position (gx is overwritten, not accumulated)
  void col2im(const float* cols, const Window2d& w, float* gx);
  // How many column floats conv2d should unroll at a time: it cuts the batch into groups of
  // images whose columns fit. 8 MiB by default: GEMMs wide enough to keep a GPU busy.
  virtual int64_t im2col_group_floats() const { return int64_t{2} << 20; }

  // ---- direct convolution, where a backend has one (no im2col columns) ----
  // y [N, O, out_h, out_w] = x [N, C, H, W] convolved with weight [O, C, kh, kw], + bias[o]
  // (bias may be null). Returns false, having written nothing, where this backend has no direct
  // path for the window (or it is switched off): conv2d then runs im2col + GEMM, the reference.
  virtual bool conv2d_direct(const float* /*x*/, const float* /*weight*/, const float* /*bias*/,
                             const Window2d& /*w*/, int64_t /*O*/, float* /*y*/) {
    return false;
  }
  // The gradients of conv2d_direct, each overwritten unless null: gx [N, C, H, W],
  // gw [O, C, kh, kw] (reads x), gb [O]. Returns false, having written nothing, where it has
  // no direct path for what was asked.
  virtual bool conv2d_direct_backward(const float* /*gy*/, const float* /*x*/,
                                      const float* /*weight*/, const Window2d& /*w*/, int64_t /*O*/,
                                      float* /*gx*/, float* /*gw*/, float* /*gb*/) {
    return false;
  }
  // conv2d_direct, ReLU and a 2x2 max-pool of stride 2 in one pass (ops/nn_conv.cpp's
  // conv2d_relu_max_pool2d): y [N, O, out_h/2, out_w/2] = max_pool2d(relu(conv2d(x))), the
  // same numbers; the full-size convolution output is never written. For backward, a byte per
  // output in `route`, [N, out_h/2 * out_w/2, O] (channels last): the window's winner, 0-3 in
  // row-major order, or 4 where the ReLU stopped the gradient (y not > 0). Returns false,
  // having written nothing, where it has no such path, or where the backward would have none.
  // fuses_conv_relu_pool(): whether it may run at all (its settings are the backend's: the
  // CPU's DPLAB_FUSE), so that conv2d_relu_max_pool2d allocates its outputs only then.
  virtual bool fuses_conv_relu_pool() const { return false; }
  virtual bool conv2d_relu_pool_direct(const float* /*x*/, const float* /*weight*/,
                                       const float* /*bias*/, const Window2d& /*w*/, int64_t /*O*/,
                                       float* /*y*/, uint8_t* /*route*/) {
    return false;
  }
  // Its gradients from g [N, O, out_h/2, out_w/2] and the forward's route; gx, gw, gb as
  // conv2d_direct_backward's.
  virtual bool conv2d_relu_pool_direct_backward(const float* /*g*/, const uint8_t* /*route*/,
                                                const float* /*x*/, const float* /*weight*/,
                                                const Window2d& /*w*/, int64_t /*O*/, float* /*gx*/,
                                                float* /*gw*/, float* /*gb*/) {
    return false;
  }

  // ---- an op cut into independent pieces, run side by side (conv2d's image groups) ----
  // How many pieces should run at once to keep the device busy: the CPU's threads; 1 on
  // CUDA, where one kernel already fills the GPU.
  virtual int lanes() const { return 1; }
  // Calls piece(i, lane) for every i in [0, n), with lane in [0, lanes): each lane runs its
  // pieces one after another, so scratch buffers indexed by lane need no lock. This default
  // runs them all on lane 0; the CPU runs lanes on threads (kernels inside single-threaded)
  // and rethrows the first exception a piece threw once every lane has stopped.
  virtual void run_pieces(int64_t n, int lanes, const std::function<void(int64_t, int)>& piece) {
    for (int64_t i = 0; i < n; ++i) piece(i, 0);
  }
  void max_pool2d(const float* x, const Window2d& w, float* y, int64_t* argmax);
  void max_pool2d_backward(const float* gy, const int64_t* argmax, const Window2d& w, float* gx);
  // padding counts in the divisor (PyTorch's count_include_pad=True)
  void avg_pool2d(const float* x, const Window2d& w, float* y);
  void avg_pool2d_backward(const float* gy, const Window2d& w, float* gx);

  // ---- optimizer steps, fused (state lives on the parameter's device) ----
  void sgd_step(const SgdArgs& a, float* param, const float* grad, float* momentum_buf, int64_t n);
  void adam_step(const AdamArgs& a, float* param, const float* grad, float* m, float* v, int64_t n);

 protected:
  // What each backend computes. The public functions above call these once the arguments
  // passed the checks of backend_checks.h, written once for every backend: backends only
  // compute.
  virtual void binary_kernel(BinaryOp op, const float* a, const Strided& a_layout, const float* b,
                             const Strided& b_layout, float* out) = 0;
  virtual void reduce_kernel(ReduceKind op, const float* x, void* out, int64_t outer, int64_t r,
                             int64_t inner) = 0;
  virtual void causal_softmax_kernel(const float* x, float* y, int64_t batch, int64_t q,
                                     int64_t k) = 0;
  virtual void im2col_kernel(const float* x, const Window2d& w, float* cols) = 0;
  virtual void col2im_kernel(const float* cols, const Window2d& w, float* gx) = 0;
  virtual void max_pool2d_kernel(const float* x, const Window2d& w, float* y, int64_t* argmax) = 0;
  virtual void max_pool2d_backward_kernel(const float* gy, const int64_t* argmax, const Window2d& w,
                                          float* gx) = 0;
  virtual void avg_pool2d_kernel(const float* x, const Window2d& w, float* y) = 0;
  virtual void avg_pool2d_backward_kernel(const float* gy, const Window2d& w, float* gx) = 0;
  virtual void sgd_step_kernel(const SgdArgs& a, float* param, const float* grad,
                               float* momentum_buf, int64_t n) = 0;
  virtual void adam_step_kernel(const AdamArgs& a, float* param, const float* grad, float* m,
                                float* v, int64_t n) = 0;
};

// The backend for a device kind. Throws Error for CUDA when dplab was built without it,
// or when no GPU is visible.
Backend& backend_for(Device d);
bool cuda_compiled();
int cuda_device_count();  // physical GPUs visible; 0 when not compiled, no driver or no GPU

}  // namespace dplab
