// conv2d_im2col.h: the reference convolution, im2col + GEMM, forward and backward, written
// once over any backend's kernels (im2col / col2im, gemm, strided copies): the CPU's
// reference, which its direct convolution (backend/cpu/fast/) is tested against, and the CUDA
// backend's only convolution. nn_conv.cpp's conv2d picks a backend's direct path where it
// has one, else this, and records the backward.
// im2col unrolls every kh x kw window of the padded input into a column, so a convolution
// becomes one matrix product: [O, C*kh*kw] @ [C*kh*kw, G*oh*ow] for a group of G images.
// The columns cost kh*kw times the images' memory, so groups are capped (backend.h);
// in return the convolution runs at GEMM speed, the trade-off Caffe made and cuDNN still
// offers.
// Read next: conv2d_im2col.cpp; the CPU's im2col kernel: backend/cpu/reference/cpu_conv_pool.cpp.
#pragma once
#include <algorithm>
#include <cstdint>

#include "framework/backend/backend.h"
#include "framework/tensor/tensor.h"

namespace dplab {

// How conv2d cuts the batch into groups of images for im2col: enough groups that each one's
// columns fit in the backend's im2col_group_floats(), and at least one per lane so every
// lane has work. Images are dealt out evenly (group sizes differ by at most one). A group's
// GEMMs are still large (N = images * oh*ow), and bounded columns stay in cache and out of
// the kernel's page-fault path (glibc maps blocks over 32 MiB afresh every time).
struct ImageGroups {
  Window2d w;
  int64_t O, CK, L, count, max_size;
  ImageGroups(const Window2d& window, int64_t out_channels, int64_t column_floats, int lanes)
      : w(window), O(out_channels), CK(window.C * window.kh * window.kw),
        L(window.out_h * window.out_w) {
    const int64_t per_image = CK * L, N = std::max<int64_t>(w.N, 1);
    count = per_image > 0 ? (N * per_image + column_floats - 1) / column_floats : 1;
    if (lanes > 1) count = (std::max<int64_t>(count, lanes) + lanes - 1) / lanes * lanes;
    count = std::clamp<int64_t>(count, 1, N);
    max_size = (N + count - 1) / count;
  }
  int64_t first(int64_t i) const {
    return w.N * i / count;
  }  // group i: images [first(i), first(i+1))
  Window2d window(int64_t i) const {
    Window2d g = w;
    g.N = first(i + 1) - first(i);
    return g;
  }
  int64_t x_offset(int64_t i) const { return first(i) * w.C * w.H * w.W; }
  int64_t y_offset(int64_t i) const { return first(i) * O * L; }
};

// One im2col convolution's plan: its image groups, and how many lanes run them side by side.
// Fixed at the forward and kept for the backward, which then sums its weight gradient over
// the same lanes in the same order.
struct Im2colPlan {
  ImageGroups groups;
  int lanes;
  Im2colPlan(const Window2d& w, int64_t O, Backend& backend)
      : groups(w, O, backend.im2col_group_floats(), backend.lanes()),
        lanes(static_cast<int>(std::min<int64_t>(backend.lanes(), groups.count))) {}
};

// A convolution's gradients, each allocated (not filled) only where one is needed: gx like x,
// gw like the weight, gb [O]. Every backward of nn_conv.cpp hands them to a backend this way.
struct ConvGrads {
  Tensor gx, gw, gb;
  ConvGrads(bool x_grad, const Shape& x_shape, const Tensor& weight, bool b_grad, int64_t O,
            const TensorOptions& options);
  // The pointers a backend kernel takes: null where no gradient is wanted.
  float* gx_data() const;
  float* gw_data() const;
  float* gb_data() const;
  std::vector<Tensor> list() const { return {gx, gw, gb}; }
};

// out [N, O, oh, ow] = conv(x, weight) + bias (bias may be undefined), group by group.
void conv2d_im2col(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Im2colPlan& plan, Tensor& out);
// The gradients of conv2d_im2col from g [N, O, oh, ow], into those of grads that are
// defined: gx overwritten, gw summed from zero (reads saved_x), gb replaced by the sum.
void conv2d_im2col_backward(const Tensor& g, const Tensor& saved_x, const Tensor& weight,
                            const Im2colPlan& plan, ConvGrads& grads);

}  // namespace dplab
