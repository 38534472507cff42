// cpu_backend.h: the CPU backend, every kernel of backend.h on host memory. Its files:
//   cpu_dispatch.{h,cpp}   which kernel runs: the CPU's features and every DPLAB_* setting,
//                          read in one place; kernels_summary()
//   cpu_backend.cpp        memory, copies, the one CpuBackend
//   cpu_threads.{h,cpp}    thread count, lanes (run_pieces)
//   cpu_elementwise.cpp, cpu_reduce.cpp, cpu_nn.cpp (softmax, nll, indexing),
//   cpu_optim.cpp (fused SGD / Adam), cpu_transformer.cpp (causal softmax, layer norm):
//                          the kernels with one implementation
//   cpu_gemm.cpp           the GEMM's checks, threads and choice: reference/ or fast/
//   cpu_gemm_lowp.cpp, cpu_half.{h,cpp}   16-bit floats
//   cpu_vector.{h,cpp}     the 8-float vector type and the tiled transpose both halves use
// reference/: the readable path the fast one is tested against
//   cpu_gemm_eigen.{h,cpp} Eigen's GEMM on a tile (built twice: baseline and AVX-512)
//   cpu_conv_pool.cpp      im2col / col2im (the reference convolution is ops/conv2d_im2col.cpp
//                          over these) and max / avg pooling
// fast/: dplab's own kernels, register-blocked
//   cpu_gemm_direct_kernel.{h,cpp}   a GEMM that reads its operands in place
//   cpu_conv_direct.cpp, cpu_conv_direct_kernel.{h,cpp}, cpu_conv_images.h: convolution
//                          without im2col; cpu_conv_fused.cpp: + ReLU + 2x2 max-pool
//   cpu_register_block.h   the P x V block of accumulators both kernels are built from
// This header is public (backend.cpp includes it), so it names no Eigen type: Eigen stays
// inside the .cpp files of this folder. Read next: cpu_dispatch.h, then cpu_gemm.cpp.
#pragma once
#include "framework/backend/backend.h"

namespace dplab {

// Choices backend.h leaves to the backend, stated once here:
//  - allocate returns 64-byte aligned memory (a cache line: two AVX2 vectors), so Eigen
//    and the compiler may use aligned loads; zero bytes give nullptr.
//  - max_pool2d's argmax is the flat index ih * W + iw inside the input plane (n, c), as in
//    PyTorch's return_indices; padding never wins (it reads as -inf). A window that holds
//    only padding (impossible when pad <= kernel / 2, which PyTorch requires) gives y = 0
//    and argmax = -1, and its gradient goes nowhere.
//  - index_add_rows / scatter_add_rows are not told how many rows `out` has, so they can
//    only check that indices are >= 0; the op layer checks the upper bound.
class CpuBackend final : public Backend {
 public:
  CpuBackend();  // tells glibc's malloc to keep freed memory (cpu_backend.cpp says why)
  void* allocate(Device d, std::size_t nbytes) override;
  void deallocate(Device d, void* p, std::size_t nbytes) override;
  void copy_from_host(Device d, void* dst, const void* src, std::size_t nbytes) override;
  void copy_to_host(Device d, void* dst, const void* src, std::size_t nbytes) override;
  void copy_device(Device dst_dev, void* dst, Device src_dev, const void* src,
                   std::size_t nbytes) override;
  void synchronize(Device d) override;

  void fill(DType t, void* out, int64_t n, double value) override;
  void strided_copy(DType t, const void* src, const Strided& src_layout, void* out) override;
  void cast(DType from, const void* src, DType to, void* dst, int64_t n) override;
  void unary(UnaryOp op, const float* x, float* y, int64_t n, float scalar) override;
  void binary_kernel(BinaryOp op, const float* a, const Strided& a_layout, const float* b,
                     const Strided& b_layout, float* out) override;
  void reduce_into(ReduceKind op, DType t, void* dst, const void* src, int64_t n) override;

  void reduce_kernel(ReduceKind op, const float* x, void* out, int64_t outer, int64_t r,
                     int64_t inner) override;

  void gemm(const GemmArgs& g, const float* a, const float* b, float* c) override;
  void gemm_lowp(const GemmArgs& g, DType t, const void* a, const void* b, void* c) override;

  void softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log) override;
  void softmax_backward(const float* gy, const float* y, float* gx, int64_t rows, int64_t cols,
                        bool log) override;
  void causal_softmax_kernel(const float* x, float* y, int64_t batch, int64_t q,
                             int64_t k) override;
  void layer_norm(const float* x, const float* w, const float* b, float* y, float* mean,
                  float* rstd, int64_t rows, int64_t cols, float eps) override;
  void layer_norm_backward(const float* gy, const float* x, const float* w, const float* mean,
                           const float* rstd, float* gx, float* gw, float* gb, int64_t rows,
                           int64_t cols) override;
  void nll_loss(const float* logp, const int64_t* target, float* out, int64_t rows,
                int64_t cols) override;
  void nll_loss_backward(const float* gout, const int64_t* target, float* glogp, int64_t rows,
                         int64_t cols) override;

  void index_rows(DType t, const void* src, int64_t src_rows, const int64_t* idx, int64_t n_idx,
                  int64_t row_elems, void* out) override;
  void index_add_rows(const float* g, const int64_t* idx, int64_t n_idx, int64_t row_elems,
                      float* out) override;
  void gather_rows(const float* src, int64_t src_rows, const int64_t* idx, int64_t rows,
                   int64_t cols, float* out) override;
  void scatter_add_rows(const float* g, const int64_t* idx, int64_t rows, int64_t cols,
                        float* out) override;

  void im2col_kernel(const float* x, const Window2d& w, float* cols) override;
  void col2im_kernel(const float* cols, const Window2d& w, float* gx) override;
  int64_t im2col_group_floats() const override;
  // fast/cpu_conv_direct.cpp (when it runs and when it declines; DPLAB_CONV: cpu_dispatch.h)
  bool conv2d_direct(const float* x, const float* weight, const float* bias, const Window2d& w,
                     int64_t O, float* y) override;
  bool conv2d_direct_backward(const float* gy, const float* x, const float* weight,
                              const Window2d& w, int64_t O, float* gx, float* gw,
                              float* gb) override;
  // fast/cpu_conv_fused.cpp: the same images, with ReLU and the 2x2 max-pool on the kernel's
  // output, unless DPLAB_FUSE switched it off (cpu_dispatch.h)
  bool fuses_conv_relu_pool() const override;
  bool conv2d_relu_pool_direct(const float* x, const float* weight, const float* bias,
                               const Window2d& w, int64_t O, float* y, uint8_t* route) override;
  bool conv2d_relu_pool_direct_backward(const float* g, const uint8_t* route, const float* x,
                                        const float* weight, const Window2d& w, int64_t O,
                                        float* gx, float* gw, float* gb) override;
  int lanes() const override;
  void run_pieces(int64_t n, int lanes, const std::function<void(int64_t, int)>& piece) override;
  void max_pool2d_kernel(const float* x, const Window2d& w, float* y, int64_t* argmax) override;
  void max_pool2d_backward_kernel(const float* gy, const int64_t* argmax, const Window2d& w,
                                  float* gx) override;
  void avg_pool2d_kernel(const float* x, const Window2d& w, float* y) override;
  void avg_pool2d_backward_kernel(const float* gy, const Window2d& w, float* gx) override;

  void sgd_step_kernel(const SgdArgs& a, float* param, const float* grad, float* momentum_buf,
                       int64_t n) override;
  void adam_step_kernel(const AdamArgs& a, float* param, const float* grad, float* m, float* v,
                        int64_t n) override;
};

// The one CpuBackend, shared by every cpu:k device (they differ only in memory accounting).
Backend& cpu_backend();

}  // namespace dplab
