// cuda_backend.h: the CUDA backend, every kernel of backend.h on NVIDIA GPUs.
// This header is included by backend.cpp (compiled by g++), so it names no CUDA type:
// streams, handles and kernels stay in this folder's .cpp and .cu files.
// Files: cuda_devices.cpp (logical -> physical GPUs, streams, cuBLAS handles),
// cuda_allocator.cpp (caching allocator), cuda_backend.cpp (memory, copies, gemm),
// cuda_backend_kernels.cpp (the rest, launching the .cu kernels of cuda_kernels.h).
// Read next: cuda_devices.h, then cuda_kernels.h.
#pragma once
#include "framework/backend/backend.h"

namespace dplab {

// Choices backend.h leaves to the backend, stated once here (the same as the CPU backend's):
//  - Kernels are not told their device: each runs on the logical device that owns its output
//    pointer (the allocator keeps a map of every cudaMalloc block), on that device's stream.
//  - Kernels are asynchronous; copy_to_host, synchronize and the kernels that validate
//    indices (nll_loss, index_rows, gather_rows, index_add_rows, scatter_add_rows) wait for
//    the stream: kernels cannot throw, so they raise a device-side flag that the host reads
//    after the launch and turns into an Error naming the bad index.
//  - max_pool2d's argmax is ih * W + iw inside the plane; padding never wins; an all-padding
//    window gives y = 0, argmax = -1. Pooling backwards overwrite gx, like col2im.
class CudaBackend final : public Backend {
 public:
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

// The one CudaBackend. Throws Error when no GPU is visible (no driver, or no device).
Backend& cuda_backend();
// Physical GPUs visible; 0 (never a throw) without a driver or a device.
int cuda_physical_device_count();

}  // namespace dplab
